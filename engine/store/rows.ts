import type { FlowErrorBody, WorkflowState } from '../../contracts/index.ts';
import type { Ctx, Instance, JsonValue, TimerPurpose } from '../core/instance.ts';

/** An instance as read from the store, with what fences the next write. */
export interface Stored {
  instance: Instance;
  rowVersion: number;
  leaseToken: string | null;
  /** What woke a waiting instance since it parked (fired timers), for the worker that claims it. */
  wakes: Wake[];
  /** When the row last changed and when it became runnable (database clock), as claimed. */
  timing?: { updatedAt: Date; runAt: Date };
  /** The W3C traceparent of the instance's start span (migration 0032); null when it was started untraced. */
  traceParent?: string | null;
}

export interface Wake {
  purpose: TimerPurpose | 'children';
  seq: number;
}

export interface WorkflowRow {
  id: string;
  env_id: string;
  domain: string;
  logic_id: string;
  version: number;
  logic_hash: string;
  state: WorkflowState;
  input: JsonValue;
  output: JsonValue;
  current_step: string | null;
  error: FlowErrorBody | null;
  generation: number;
  /** Without `outputs`: those live in workflow_outputs (migration 0011), read with OUTPUTS_OF_W. */
  ctx: Omit<Ctx, 'outputs'>;
  /** The instance's step outputs, `OUTPUTS_OF_W` of the query that read the row. */
  outputs: Ctx['outputs'];
  row_version: string | number;
  lease_token: string | null;
  wakes: Record<string, Wake> | null;
  correlation_id: string | null;
  parent_id: string | null;
  parent_seq: number | null;
  branch_index: number | null;
  created_at: Date;
  updated_at: Date;
  run_at: Date;
  trace_parent?: string | null;
}

/**
 * The select-list item that reads an instance's step outputs (migration 0011) beside its row,
 * aliased `w`: every query that builds an Instance from a row selects it, and toStored puts them
 * back into ctx.outputs.
 */
export const OUTPUTS_OF_W = `(SELECT coalesce(jsonb_object_agg(o.step, o.output), '{}') FROM workflow_outputs o WHERE o.workflow_id = w.id) AS outputs`;

/** The instance's ctx as the core knows it: the row's ctx with its outputs back in. */
export function ctxOf(r: Pick<WorkflowRow, 'id' | 'ctx' | 'outputs'>): Ctx {
  // a query that forgot OUTPUTS_OF_W would hand the core an instance without its outputs
  if (r.outputs === undefined) throw new Error(`workflow ${r.id} was read without its outputs (select OUTPUTS_OF_W)`);
  return { ...r.ctx, outputs: r.outputs };
}

/** The ctx as the workflows row keeps it: without its outputs, which have rows of their own. */
export function storedCtx(ctx: Ctx): Omit<Ctx, 'outputs'> {
  const { outputs: _, ...rest } = ctx;
  return rest;
}

/**
 * The outputs a transition changed, as write_effects() reads them: the ones new to the instance,
 * to insert; the ones it had and now holds another value for, to update; the ones it removed (a
 * rewind), to delete. `before` is what the store holds, as the instance was read or last
 * committed. An output set to undefined has no JSON: removed too.
 */
export function outputsParam(
  before: Ctx['outputs'],
  ctx: Ctx,
  changed: readonly string[],
): { added: Ctx['outputs']; replaced: Ctx['outputs']; forgotten: string[] } {
  const added: Ctx['outputs'] = {};
  const replaced: Ctx['outputs'] = {};
  const forgotten: string[] = [];
  for (const step of changed) {
    const value = ctx.outputs[step];
    const stored = Object.hasOwn(before, step) && before[step] !== undefined;
    if (Object.hasOwn(ctx.outputs, step) && value !== undefined) (stored ? replaced : added)[step] = value;
    else if (stored) forgotten.push(step);
  }
  return { added, replaced, forgotten };
}

export function toStored(r: WorkflowRow): Stored {
  return {
    rowVersion: Number(r.row_version),
    leaseToken: r.lease_token,
    wakes: Object.values(r.wakes ?? {}),
    timing: { updatedAt: r.updated_at, runAt: r.run_at },
    traceParent: r.trace_parent ?? null,
    instance: {
      id: r.id,
      env: r.env_id,
      domain: r.domain,
      logicId: r.logic_id,
      version: r.version,
      logicHash: r.logic_hash,
      state: r.state,
      input: r.input,
      output: r.output,
      currentStep: r.current_step,
      error: r.error,
      generation: r.generation,
      correlationId: r.correlation_id,
      parentId: r.parent_id,
      parentSeq: r.parent_seq,
      branchIndex: r.branch_index,
      ctx: ctxOf(r),
    },
  };
}
