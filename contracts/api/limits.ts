import { z } from 'zod';
import { EnvId, Reason } from './common.ts';

/**
 * A limited resource's name: `handler:<NAME>` (a handler profile, as in its variables), or
 * `key:<logicId>:<step>` / `key:<logicId>:*` (a per-key limit a definition declares).
 */
export const LimitResource = z
  .string()
  .regex(/^(handler:[A-Za-z0-9_.-]{1,128}|key:[a-z][a-z0-9_.-]{0,127}:([A-Za-z_][A-Za-z0-9_-]{0,127}|\*))$/, 'a resource is handler:<NAME>, key:<logicId>:<step> or key:<logicId>:*');

/** The env in a limit's path, or `*`: a limit on every env's calls at once (the token needs `envs: ["*"]`). */
export const LimitScope = z.union([EnvId, z.literal('*')]);

export const LimitParams = z.strictObject({ env: LimitScope, resource: LimitResource });
export type LimitParams = z.infer<typeof LimitParams>;
export const LimitScopeParams = z.strictObject({ env: LimitScope });

/** `PUT /v1/envs/{env}/limits/{resource}`: the limit in force from now on, replacing configuration; null fields are unlimited. */
export const PutLimitBody = z
  .strictObject({
    concurrency: z.int().min(1).max(1_000_000).nullable(),
    rate: z.number().positive().max(1_000_000).nullable(),
    burst: z.int().min(1).max(1_000_000).nullable().optional(),
    reason: Reason,
  })
  .meta({ id: 'PutLimitBody' });
export type PutLimitBody = z.infer<typeof PutLimitBody>;

/** `DELETE /v1/envs/{env}/limits/{resource}`: back to configuration. */
export const DeleteLimitBody = z.strictObject({ reason: Reason }).meta({ id: 'DeleteLimitBody' });

/** A limit in force and its load: where it comes from, permits held, instances waiting. */
export const LimitInfo = z
  .object({
    scope: z.string(),
    resource: z.string(),
    concurrency: z.int().nullable(),
    rate: z.number().nullable(),
    burst: z.int().nullable(),
    /** `config` (FLOW_HANDLER_<NAME>_CONCURRENCY…), `declared` (a definition's `concurrency`) or `override` (set through this API). */
    source: z.enum(['config', 'declared', 'override']),
    updatedBy: z.string().nullable(),
    updatedAt: z.string().nullable(),
    inFlight: z.int(),
    waiting: z.int(),
  })
  .meta({ id: 'LimitInfo' });
export type LimitInfo = z.infer<typeof LimitInfo>;

export const LimitList = z.object({ items: z.array(LimitInfo) }).meta({ id: 'LimitList' });
export type LimitList = z.infer<typeof LimitList>;

export const LimitWaitersQuery = z.strictObject({ resource: LimitResource.optional() });

/** An instance waiting for a permit, and why: no room (`concurrency`) or its token not yet there (`rate`, until `dueAt`). */
export const LimitWaiter = z
  .object({
    workflowId: z.string(),
    scope: z.string(),
    resource: z.string(),
    key: z.string(),
    reason: z.enum(['concurrency', 'rate']),
    dueAt: z.string().nullable(),
    since: z.string(),
  })
  .meta({ id: 'LimitWaiter' });
export const LimitWaiterList = z.object({ items: z.array(LimitWaiter) }).meta({ id: 'LimitWaiterList' });
export type LimitWaiterList = z.infer<typeof LimitWaiterList>;
