import { z } from 'zod';
import { LogicId } from '../logic-version.ts';

/**
 * How a group of live instances may still reach a handler path, the nearest first:
 * - `at`: they are at a step that calls it (about to run it, running it, or parked in it);
 * - `ahead`: their path from where they are reaches a step that calls it;
 * - `compensation`: unwinding would call it, through a compensation they registered or one a step
 *   ahead of them registers;
 * - `passed`: none of these: they are past every step that calls it, and only a rewind back (the
 *   `repair` or `replayFrom` verb) would call it again;
 * - `ungrouped`: beyond the report's group limit, so not looked at; counted as still calling.
 */
export const HandlerReach = z.enum(['at', 'ahead', 'compensation', 'passed', 'ungrouped']);
export type HandlerReach = z.infer<typeof HandlerReach>;

/** Live instances of one version that stand at the same place, and how they may still reach the path. */
export const HandlerPathGroup = z
  .strictObject({
    state: z.enum(['pending', 'processing', 'waiting', 'compensating']).nullable(),
    /** The step they are at (compensating: the one that failed); null for `ungrouped`. */
    currentStep: z.string().nullable(),
    count: z.int().min(1),
    reach: HandlerReach,
    /** The call that reaches it, as in `calledFrom`; null for `passed` and `ungrouped`. */
    via: z.string().nullable(),
  })
  .meta({ id: 'HandlerPathGroup' });
export type HandlerPathGroup = z.infer<typeof HandlerPathGroup>;

/** One version that calls a handler path, with its instances that have not ended, by state and by where they are. */
export const HandlerPathVersion = z
  .strictObject({
    logicId: LogicId,
    version: z.int().min(1),
    active: z.boolean(),
    /** Where it calls: `capture`, `reserve (compensate)`, `risk (import lookup)`. */
    calledFrom: z.array(z.string()),
    live: z.record(z.string(), z.int().min(0)),
    /** The live instances grouped by state and current step, the ones that may still call it first. */
    groups: z.array(HandlerPathGroup),
  })
  .meta({ id: 'HandlerPathVersion' });

/** Whether a handler, or one path of it, may be turned off now, and why. */
const Verdict = {
  mayTurnOff: z.boolean(),
  /** One sentence: the active versions or live instances that still need it, or why nothing does. */
  reason: z.string(),
};

export const HandlerPathUsage = z
  .strictObject({
    path: z.string(),
    methods: z.array(z.string()),
    versions: z.array(HandlerPathVersion),
    ...Verdict,
  })
  .meta({ id: 'HandlerPathUsage' });

export const HandlerUsage = z
  .strictObject({
    handler: z.string(),
    paths: z.array(HandlerPathUsage),
    ...Verdict,
  })
  .meta({ id: 'HandlerUsage' });
export type HandlerUsage = z.infer<typeof HandlerUsage>;

/** `GET /v1/envs/{env}/handlers`: every handler profile the env's versions call, by path. */
export const HandlerUsageList = z
  .strictObject({
    items: z.array(HandlerUsage),
    /**
     * Versions the caller may not read that call a listed handler: they are not named, but they
     * count in every verdict.
     */
    unreadable: z.int().min(0),
  })
  .meta({ id: 'HandlerUsageList' });
export type HandlerUsageList = z.infer<typeof HandlerUsageList>;

export const HandlerUsageQuery = z.strictObject({
  handler: z.string().min(1).max(200).optional(),
  path: z.string().startsWith('/').max(2000).optional(),
});
