import { z } from 'zod';
import { LogicId } from '../logic-version.ts';

/** One version that calls a handler path, with its instances that have not ended, by state. */
export const HandlerPathVersion = z
  .strictObject({
    logicId: LogicId,
    version: z.int().min(1),
    active: z.boolean(),
    /** Where it calls: `capture`, `reserve (compensate)`, `risk (import lookup)`. */
    calledFrom: z.array(z.string()),
    live: z.record(z.string(), z.int().min(0)),
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
