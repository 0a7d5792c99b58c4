import { z } from 'zod';
import { LogicId, VersionNumber } from './logic-version.ts';
import { WORKFLOW_STATES } from './states.ts';

/** WorkflowRecord and the requests around it (ARCHITECTURE.md, Contracts). */

export const Json: z.ZodType<unknown> = z.unknown();

export const FlowErrorBody = z.object({
  code: z.string(),
  message: z.string(),
  step: z.string().optional(),
  /** Which expression of the step failed (`input`, `payload`, `branches[0].when`…), for FLOW_EXPR_FAILED. */
  field: z.string().optional(),
  status: z.number().optional(),
});
export type FlowErrorBody = z.infer<typeof FlowErrorBody>;

export const AttemptState = z.enum(['running', 'succeeded', 'failed', 'parked', 'superseded']);
export type AttemptState = z.infer<typeof AttemptState>;

export const StepAttempt = z.object({
  step: z.string(),
  /** `compensation` for the runs that undo a step. */
  kind: z.enum(['step', 'compensation']),
  attempt: z.int().min(1),
  generation: z.int().min(0),
  state: AttemptState,
  input: Json,
  output: Json,
  error: FlowErrorBody.nullable(),
  idempotencyKey: z.string().nullable(),
  startedAt: z.string(),
  finishedAt: z.string().nullable(),
});
export type StepAttempt = z.infer<typeof StepAttempt>;

export const CompensationState = z.enum(['registered', 'running', 'succeeded', 'failed']);
export const CompensationEntry = z.object({
  step: z.string(),
  /** The generation whose run of the step registered it: a repair re-runs a step under a new one. */
  generation: z.int().min(0),
  state: CompensationState,
  attempts: z.int().min(0),
  error: FlowErrorBody.nullable(),
});
export type CompensationEntry = z.infer<typeof CompensationEntry>;

export const WorkflowRecord = z.object({
  id: z.string(),
  env: z.string(),
  domain: z.string(),
  logicId: z.string(),
  version: z.int(),
  logicHash: z.string(),
  state: z.enum(WORKFLOW_STATES as [string, ...string[]]),
  input: Json,
  output: Json,
  currentStep: z.string().nullable(),
  error: FlowErrorBody.nullable(),
  generation: z.int().min(0),
  correlationId: z.string().nullable(),
  parentId: z.string().nullable(),
  branchIndex: z.int().nullable(),
  createdAt: z.string(),
  updatedAt: z.string(),
  steps: z.array(StepAttempt),
  compensations: z.array(CompensationEntry),
  /** Its search attributes (docs/search-attributes.md), a time as its ISO 8601 instant in UTC; absent when it has none. */
  attributes: z.record(z.string(), z.union([z.string(), z.number()])).optional(),
});
export type WorkflowRecord = z.infer<typeof WorkflowRecord>;

export const CreateWorkflowRequest = z.strictObject({
  logicId: LogicId,
  /** Pin a version; default: the active (highest published) version. */
  version: VersionNumber.optional(),
  input: Json,
  env: z.string().min(1).max(64).optional(),
  correlationId: z.string().min(1).max(200).optional(),
  /** Starting twice with the same key and request returns the first instance; another request is refused (409). */
  idempotencyKey: z.string().min(1).max(200).optional(),
  /** Where the outbox relay POSTs a notification on every transition into a terminal state. */
  callback: z.strictObject({ url: z.url({ protocol: /^https?$/ }).max(2000) }).optional(),
  /** Claims take an env's instances of higher priority first. (Default: the definition's `priority`, else 0) */
  priority: z.int().min(-1000).max(1000).optional(),
});
export type CreateWorkflowRequest = z.infer<typeof CreateWorkflowRequest>;

/** What an executor reports about one step attempt (ARCHITECTURE.md, Contracts: outbound calls). */
export const StepOutcome = z.discriminatedUnion('status', [
  z.object({ status: z.literal('succeeded'), output: Json }),
  z.object({
    status: z.literal('failed'),
    error: FlowErrorBody,
    /** transient failures are retried with backoff; permanent ones are not. */
    retryable: z.boolean(),
    retryAfterMs: z.number().min(0).optional(),
    /**
     * For a 429 or 503 answer: how long in all such answers may hold the step without using an
     * attempt, when the step sets no `throttleBudgetMs` (the engine's FLOW_THROTTLE_BUDGET_MS).
     */
    throttleBudgetMs: z.number().min(0).optional(),
    /**
     * `taken`: the call took effect although the attempt failed (the service answered 2xx with a
     * result the engine cannot store), so the step keeps its compensation. Absent, a permanent
     * failure took no effect.
     */
    effect: z.literal('taken').optional(),
  }),
  /** 202 {"status":"waiting"}: the owning service completes the step later with the resume token. */
  z.object({ status: z.literal('parked') }),
]);
export type StepOutcome = z.infer<typeof StepOutcome>;
