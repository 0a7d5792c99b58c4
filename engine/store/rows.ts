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
  ctx: Ctx;
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
}

export function toStored(r: WorkflowRow): Stored {
  return {
    rowVersion: Number(r.row_version),
    leaseToken: r.lease_token,
    wakes: Object.values(r.wakes ?? {}),
    timing: { updatedAt: r.updated_at, runAt: r.run_at },
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
      ctx: r.ctx,
    },
  };
}
