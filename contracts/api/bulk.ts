import { z } from 'zod';
import { StepName } from '../logic-version.ts';
import { WORKFLOW_STATES } from '../states.ts';
import { Instant, PgIntParam, text } from './storable.ts';
import { AttributeFilters } from './attributes.ts';

/**
 * Which instances a listing or a bulk job covers. The console keeps it in its URL, so a view can
 * be shared; a bulk job stores it with the job.
 */
export const InstanceFilter = z.strictObject({
  state: z.enum(WORKFLOW_STATES as [string, ...string[]]).optional(),
  logicId: text(1, 200).optional(),
  version: PgIntParam.optional(),
  /** Only instances at this step (running, parked or about to run it). */
  step: StepName.optional(),
  correlationId: text(1, 200).optional(),
  /** Only the children of this instance. */
  parent: z.uuid().optional(),
  /** Only instances that should be moving and are not (the same definition as `GET /workflows?stuck=true`). */
  stuck: z.boolean().optional(),
  /** Created at or after this instant (ISO 8601). */
  from: Instant.optional(),
  /** Created before this instant (ISO 8601). */
  to: Instant.optional(),
  /** Search attributes: `{ accountId: 'acct-2', 'amount.gte': '100' }` (docs/search-attributes.md). */
  attributes: AttributeFilters.optional(),
  /** Only instances with a recorded SLA breach (docs/sla.md). */
  slaBreached: z.boolean().optional(),
});
export type InstanceFilter = z.infer<typeof InstanceFilter>;

export const BULK_VERBS = ['retry', 'cancel', 'replay'] as const;
export const BulkVerb = z.enum(BULK_VERBS);
export type BulkVerb = z.infer<typeof BulkVerb>;
/** What a job runs: a bulk verb, or a migration (`POST /v1/envs/{env}/migrations`). */
export const JOB_VERBS = [...BULK_VERBS, 'migrate'] as const;
export const JobVerb = z.enum(JOB_VERBS);
export type JobVerb = z.infer<typeof JobVerb>;

/** `POST /v1/envs/{env}/bulk/{verb}`: preview with `dryRun`, else start a server-side job. */
export const BulkRequest = z.strictObject({
  filter: InstanceFilter,
  reason: text(1, 2000),
  dryRun: z.boolean().optional(),
  /** cancel: run the compensations of completed steps first. */
  compensate: z.boolean().optional(),
  /** replay: the step to replay from. */
  step: text(1, 200).optional(),
  /** At most this many instances. (Default: 1000) */
  limit: z.int().min(1).max(10_000).optional(),
});
export type BulkRequest = z.infer<typeof BulkRequest>;

export const BulkPreview = z.object({
  count: z.int(),
  sample: z.array(z.object({ id: z.string(), logicId: z.string(), version: z.int(), state: z.string(), currentStep: z.string().nullable() })),
});
export type BulkPreview = z.infer<typeof BulkPreview>;

export const BulkItem = z.object({
  workflowId: z.string(),
  status: z.enum(['pending', 'ok', 'failed', 'skipped']),
  /** The instance's state after the verb. */
  state: z.string().nullable(),
  error: z.object({ code: z.string(), message: z.string() }).nullable(),
});
export type BulkItem = z.infer<typeof BulkItem>;

export const BulkJob = z.object({
  id: z.string(),
  verb: JobVerb,
  filter: InstanceFilter,
  reason: z.string(),
  actor: z.string(),
  state: z.enum(['running', 'done', 'aborted']),
  total: z.int(),
  done: z.int(),
  failed: z.int(),
  createdAt: z.string(),
  finishedAt: z.string().nullable(),
  items: z.array(BulkItem),
});
export type BulkJob = z.infer<typeof BulkJob>;
