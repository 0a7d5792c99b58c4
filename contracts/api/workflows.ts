import { z } from 'zod';
import { WORKFLOW_STATES } from '../states.ts';
import { CompensationEntry, CreateWorkflowRequest, FlowErrorBody, Json, StepAttempt, WorkflowRecord } from '../record.ts';
import { LogicId } from '../logic-version.ts';
import { Instant, PgIntParam, StorableJson, text } from './storable.ts';
import { ATTRIBUTE_QUERY_KEY, AttributeFilterValue, MAX_ATTRIBUTE_FILTERS } from './attributes.ts';

/**
 * `POST /v1/envs/{env}/workflows`: the CreateWorkflowRequest without `env` (it is in the path) and
 * without `idempotencyKey` (it is the `Idempotency-Key` header).
 */
export const StartWorkflowBody = CreateWorkflowRequest.omit({ env: true, idempotencyKey: true })
  .extend({ input: StorableJson, correlationId: text(1, 200).optional() })
  .meta({ id: 'StartWorkflowRequest' });
export type StartWorkflowBody = z.infer<typeof StartWorkflowBody>;

export const StartWorkflowHeaders = z.object({
  'idempotency-key': text(1, 200).optional().describe('Starting twice with the same key returns the first instance (200)'),
});

export const WorkflowRecordSchema = WorkflowRecord.meta({ id: 'WorkflowRecord' });

const queryBool = z.enum(['true', 'false']).transform((v) => v === 'true');

const listShape = {
  state: z.enum(WORKFLOW_STATES as [string, ...string[]]).optional(),
  logicId: LogicId.optional(),
  version: PgIntParam.optional(),
  correlationId: text(1, 200).optional(),
  /** Only instances that should be moving and are not; each item then says why (`stuckReason`). */
  stuck: queryBool.optional(),
  /** Only the children of this instance. */
  parent: z.uuid().optional(),
  /** Created at or after this instant (ISO 8601). */
  from: Instant.optional(),
  /** Created before this instant (ISO 8601). */
  to: Instant.optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  /** `nextCursor` of the previous page; opaque. */
  cursor: z.string().min(1).max(200).optional(),
  /** Only instances with a recorded SLA breach (docs/sla.md). */
  slaBreached: queryBool.optional(),
};

export const ListWorkflowsQuery = z
  .object(listShape)
  // search attributes: `attr.<name>=value`, `attr.<name>.gte=value` (contracts/api/attributes.ts)
  .catchall(AttributeFilterValue)
  .superRefine((q, ctx) => {
    const known = new Set(Object.keys(listShape));
    const extra = Object.keys(q).filter((k) => !known.has(k));
    for (const k of extra.filter((k) => !ATTRIBUTE_QUERY_KEY.test(k))) {
      ctx.addIssue({ code: 'custom', path: [k], message: `unknown parameter ${k} (an attribute filter is attr.<name> or attr.<name>.<gt|gte|lt|lte>)` });
    }
    if (extra.length > MAX_ATTRIBUTE_FILTERS) ctx.addIssue({ code: 'custom', path: [], message: `at most ${MAX_ATTRIBUTE_FILTERS} attribute filters` });
  });
export type ListWorkflowsQuery = z.input<typeof ListWorkflowsQuery>;

export const WorkflowSummary = z
  .strictObject({
    id: z.string(),
    logicId: z.string(),
    version: z.int(),
    state: z.string(),
    currentStep: z.string().nullable(),
    error: FlowErrorBody.nullable(),
    correlationId: z.string().nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
    /** Why it should be moving and is not (docs/operations.md, "Runbook: stuck instances"); absent when it is not stuck. */
    stuckReason: z.string().optional(),
  })
  .meta({ id: 'WorkflowSummary' });
export type WorkflowSummary = z.infer<typeof WorkflowSummary>;

export const WorkflowPage = z
  .strictObject({
    items: z.array(WorkflowSummary),
    /** Pass as `cursor` for the next page; null on the last one. */
    nextCursor: z.string().nullable(),
  })
  .meta({ id: 'WorkflowPage' });
export type WorkflowPage = z.infer<typeof WorkflowPage>;

export const AuditEntrySchema = z
  .strictObject({
    verb: z.string(),
    /** The token subject that acted. */
    actor: z.string(),
    reason: z.string().nullable(),
    args: Json,
    before: Json,
    after: Json,
    at: z.string(),
  })
  .meta({ id: 'AuditEntry' });
export type AuditEntrySchema = z.infer<typeof AuditEntrySchema>;

export const WorkflowHistory = z
  .strictObject({
    id: z.string(),
    attempts: z.array(StepAttempt),
    compensations: z.array(CompensationEntry),
    audit: z.array(AuditEntrySchema),
  })
  .meta({ id: 'WorkflowHistory' });
export type WorkflowHistory = z.infer<typeof WorkflowHistory>;

/** The format tag of an exported trace (`s8flow trace`, `…/history?format=trace`). */
export const TRACE_FORMAT = 'sentin8-flow.trace/1';

export const HistoryQuery = z.strictObject({
  /** `trace`: the instance's journal as a trace file that `replay()` of sentin8-flow/testing re-derives. */
  format: z.enum(['history', 'trace']).default('history'),
});

/**
 * An exported trace: the pinned LogicVersion hash, the instance as created, every journalled input
 * with the decision committed for it, and the record as it stands (engine/core/journal.ts, `Trace`).
 */
export const WorkflowTrace = z
  .object({
    format: z.literal(TRACE_FORMAT),
    logicHash: z.string(),
    /** The instance as created, before its first transition. */
    initial: Json,
    /** `{ event, decision, atMs, from }` per committed input, in order. */
    entries: z.array(Json),
    /** The record as it stands: replay checks the trace ends there. */
    final: Json.optional(),
  })
  .meta({ id: 'WorkflowTrace' });
