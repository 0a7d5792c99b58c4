import { z } from 'zod';
import { LimitInfo } from './limits.ts';
import { WorkflowSummary } from './workflows.ts';

/** An instance the Overview lists as stuck or dead-lettered, and why (`dead_lettered`, or a stuck reason). */
export const ListedInstance = z
  .object({
    ...WorkflowSummary.pick({ id: true, logicId: true, version: true, state: true, currentStep: true, error: true, updatedAt: true }).shape,
    reason: z.string(),
  })
  .meta({ id: 'ListedInstance' });
export type ListedInstance = z.infer<typeof ListedInstance>;

/** A handler profile whose calls in this env are paused: its circuit is open (docs/owning-services.md). */
export const PausedHandler = z
  .object({
    handler: z.string(),
    /** Why: `circuit_open`. */
    reason: z.string(),
    /** Consecutive failed calls, and the last one's error. */
    failures: z.int(),
    lastError: z.string().nullable(),
    openedAt: z.string().nullable(),
    /** When one probe call may go; a success closes the circuit. */
    openUntil: z.string().nullable(),
  })
  .meta({ id: 'PausedHandler' });
export type PausedHandler = z.infer<typeof PausedHandler>;

/** `GET /v1/envs/{env}/overview`: what an operator looks at first. */
export const Overview = z
  .object({
    counts: z.array(z.object({ logicId: z.string(), version: z.int(), state: z.string(), count: z.int() })),
    /** Instances parked on a decision. */
    decisions: z.array(z.object({ id: z.string(), logicId: z.string(), version: z.int(), step: z.string(), correlationId: z.string().nullable(), since: z.string() })),
    /** Instances a worker could claim now. */
    queueDepth: z.int(),
    /** Age of the oldest of them, in ms (0 when none). */
    oldestRunnableMs: z.number(),
    stuck: z.array(ListedInstance),
    deadLettered: z.array(ListedInstance),
    /** SLA breaches recorded in the env (docs/sla.md): how many, and the latest; `step` null is the instance's own SLA. */
    slaBreaches: z.object({
      count: z.int(),
      recent: z.array(z.object({ id: z.string(), logicId: z.string(), step: z.string().nullable(), within: z.string(), breachedAt: z.string() })),
    }),
    /** The limits in force for the env's calls (handlers, keys), with permits held and instances waiting. */
    limits: z.array(LimitInfo).optional(),
    /** Handler profiles whose calls are paused; their instances wait without using attempts. */
    pausedHandlers: z.array(PausedHandler),
  })
  .meta({ id: 'Overview' });
export type Overview = z.infer<typeof Overview>;
