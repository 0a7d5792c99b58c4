import { z } from 'zod';
import { LogicId, StepName, VersionNumber } from '../logic-version.ts';
import { InstanceFilter } from './bulk.ts';
import { Reason } from './common.ts';
import { MAX_MIGRATE, MAX_MIGRATE_PAGE } from '../migrate-limits.ts';
import { CompatibilityGroup, CompatibilityReason } from './compatibility.ts';

export { MAX_MIGRATE, MAX_MIGRATE_PAGE };

/**
 * `POST /v1/envs/{env}/migrations`: move instances of `logicId@fromVersion` to `toVersion` (any
 * later published version of the same definition). `dryRun` answers, per group of instances of
 * one shape and for one page of instances, where they would land, what would run next under which
 * keys, or why they stay; without it a server-side bulk job
 * moves them (`GET /v1/envs/{env}/bulk/{jobId}` follows it).
 */
export const MigrateRequest = z
  .strictObject({
    logicId: LogicId,
    fromVersion: VersionNumber,
    toVersion: VersionNumber,
    /** Which instances of `fromVersion`: the listing filter (its logicId and version, when given, must be these), plus `step`. (Default: every live one) */
    filter: InstanceFilter.optional(),
    /** These instances instead of a filter; each not on `fromVersion` is refused (FLOW_MIGRATE_WRONG_VERSION). */
    ids: z.array(z.uuid()).min(1).max(MAX_MIGRATE).optional(),
    /** Steps renamed in the target: `{ oldStep: newStep }`. */
    renames: z.record(StepName, StepName).optional(),
    reason: Reason,
    dryRun: z.boolean().optional(),
    /** Move to `toVersion` even when it is retired (else FLOW_MIGRATE_TARGET_RETIRED, 409). (Default: false) */
    allowRetired: z.boolean().optional(),
    /** At most this many instances. (Default: 1000) */
    limit: z.int().min(1).max(MAX_MIGRATE).optional(),
    /** Dry run only: list the instances after this one (the previous page's `nextAfter`). (Default: from the first) */
    after: z.uuid().optional(),
    /** Dry run only: list at most this many instances. (Default: 100) */
    pageSize: z.int().min(1).max(MAX_MIGRATE_PAGE).optional(),
  })
  .meta({ id: 'MigrateRequest' });
export type MigrateRequest = z.infer<typeof MigrateRequest>;

const Next = CompatibilityGroup.shape.next.unwrap();
const Refusal = z.strictObject({ code: z.string(), message: z.string(), retryable: z.boolean(), reasons: z.array(CompatibilityReason) });

export const MigrationPlan = z
  .strictObject({
    workflowId: z.uuid(),
    state: z.string(),
    from: z.strictObject({ version: z.int(), step: z.string().nullable() }),
    /** Why it would stay where it is: a stable `FLOW_MIGRATE_*` code; `retryable` when it may move later as it is (it is processing). */
    refusal: Refusal.nullable(),
    /** Where it would be on the target (its step under its new name); null when refused. */
    lands: z.strictObject({ version: z.int(), step: z.string().nullable() }).nullable(),
    /** The attempt under way that moves with it, under the key it already carries. */
    keeps: z.strictObject({ step: z.string(), attempt: z.int(), idempotencyKey: z.string() }).nullable(),
    /** What would run next on the target, under which keys (each call answered as before, a parked decision with its first option). */
    next: Next.nullable(),
  })
  .meta({ id: 'MigrationPlan' });
export type MigrationPlan = z.infer<typeof MigrationPlan>;

/**
 * Selected instances that share a shape: where they are, what they hold, and so one verdict. The
 * dry run plans one of them (`representative`) and reads the others' plans off it.
 */
export const MigrationGroup = z
  .strictObject({
    version: z.int(),
    state: z.string(),
    currentStep: z.string().nullable(),
    running: z.enum(['step', 'compensation']).nullable(),
    generation: z.int().min(0),
    /** Steps whose output the instances hold. */
    outputs: z.array(z.string()),
    /** Steps whose compensation is registered and still to run. */
    compensations: z.array(z.string()),
    /** Steps entered more than once in this generation, with their visit count (part of their keys). */
    visits: z.record(z.string(), z.int()),
    /** A worker holds them now (applying a wake-up): refused, retryable (FLOW_MIGRATE_PROCESSING). */
    held: z.boolean(),
    /** Names of the messages buffered for them, waiting for a waitFor step. */
    messages: z.array(z.string()),
    count: z.int().min(1),
    /** The one planned; `next` names its keys. */
    representative: z.uuid(),
    refusal: Refusal.nullable(),
    lands: z.strictObject({ version: z.int(), step: z.string().nullable() }).nullable(),
    next: Next.nullable(),
  })
  .meta({ id: 'MigrationGroup' });
export type MigrationGroup = z.infer<typeof MigrationGroup>;

export const MigrationPreview = z
  .strictObject({
    dryRun: z.literal(true),
    logicId: LogicId,
    from: z.strictObject({ version: z.int(), hash: z.string() }),
    to: z.strictObject({ version: z.int(), hash: z.string() }),
    renames: z.record(z.string(), z.string()),
    /** Instances selected (at most `limit`), how many would move, how many would be refused. */
    selected: z.int().min(0),
    moves: z.int().min(0),
    refused: z.int().min(0),
    /** The selection by shape, the largest group first: each group's count, plan and refusal. */
    groups: z.array(MigrationGroup),
    /** One page of the selection, in its order (oldest first, or the order of `ids`): each instance's plan, read off its group's. */
    items: z.array(MigrationPlan),
    /** Where the next page starts (the request's `after`); null when this page is the last. */
    nextAfter: z.uuid().nullable(),
  })
  .meta({ id: 'MigrationPreview' });
export type MigrationPreview = z.infer<typeof MigrationPreview>;
