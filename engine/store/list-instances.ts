import type { FlowErrorBody, WorkflowState } from '../../contracts/index.ts';
import type { Ctx } from '../core/instance.ts';
import { ctxOf, OUTPUTS_OF_W, type WorkflowRow } from './rows.ts';
import type { Client } from './tx.ts';
import { filterClause } from './workflow-filter.ts';

export interface ListedInstance {
  id: string;
  logicId: string;
  version: number;
  state: WorkflowState;
  currentStep: string | null;
  error: FlowErrorBody | null;
  /**
   * Why it is listed: `dead_lettered`; or, for a stuck one, one of `STUCK_REASONS`
   * (engine/store/workflow-filter.ts).
   */
  reason: string;
  updatedAt: string;
  /** The full context snapshot: step outputs, the prepared attempt, the compensation stack. */
  ctx: Ctx;
}

interface Row {
  id: string;
  logic_id: string;
  version: number;
  state: WorkflowState;
  current_step: string | null;
  error: FlowErrorBody | null;
  reason: string;
  updated_at: Date;
  ctx: WorkflowRow['ctx'];
  outputs: WorkflowRow['outputs'];
}

const toListed = (r: Row): ListedInstance => ({
  id: r.id,
  logicId: r.logic_id,
  version: r.version,
  state: r.state,
  currentStep: r.current_step,
  error: r.error,
  reason: r.reason,
  updatedAt: r.updated_at.toISOString(),
  ctx: ctxOf(r),
});

export async function listDeadLettered(c: Client, limit = 100): Promise<ListedInstance[]> {
  const res = await c.query<Row>(
    `SELECT w.*, ${OUTPUTS_OF_W}, 'dead_lettered' AS reason FROM workflows w WHERE w.state = 'dead_lettered' ORDER BY w.updated_at LIMIT $1`,
    [limit],
  );
  return res.rows.map(toListed);
}

/**
 * Instances that should be moving and are not, each with its reason (`STUCK_REASONS`), oldest
 * change first: the rows the list filter `stuck: true` selects, by the same definition.
 */
export async function listStuck(c: Client, args: { pendingForMs?: number; parkedForMs?: number; limit?: number }): Promise<ListedInstance[]> {
  const params: unknown[] = [];
  const { where, reason } = filterClause({ ...args, stuck: true }, params);
  const res = await c.query<Row>(
    `SELECT w.*, ${OUTPUTS_OF_W}, ${reason()} AS reason FROM workflows w WHERE ${where} ORDER BY w.updated_at LIMIT ${Number(args.limit ?? 100)}`,
    params,
  );
  return res.rows.map(toListed);
}
