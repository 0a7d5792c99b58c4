import type { FlowErrorBody, WorkflowState } from '../../contracts/index.ts';
import type { Ctx } from '../core/instance.ts';
import { ctxOf, OUTPUTS_OF_W, type WorkflowRow } from './rows.ts';
import type { Client } from './tx.ts';

export interface ListedInstance {
  id: string;
  logicId: string;
  version: number;
  state: WorkflowState;
  currentStep: string | null;
  error: FlowErrorBody | null;
  /**
   * Why it is listed: `dead_lettered`; or, for a stuck one, `lease_expired`, `deadline_passed` (a
   * decision's deadline), `callback_overdue` (a 202-answered step's timeoutMs), `delay_overdue`,
   * `children_overdue` (a child's end not yet applied) or `pending_too_long`.
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
 * Instances that should be moving and are not, once per reason: held by a worker whose lease ran
 * out; waiting on a timer that is overdue (named by what the timer ends: a deadline, a callback's
 * timeout, a delay, a child's end) — a timer is overdue when no poller fired it; or runnable
 * (pending, compensating and unheld, or woken and not yet claimed) for longer than `pendingForMs`.
 */
export async function listStuck(c: Client, args: { pendingForMs: number; limit?: number }): Promise<ListedInstance[]> {
  const res = await c.query<Row>(
    `SELECT w.*, ${OUTPUTS_OF_W} FROM (
     SELECT w.*, 'lease_expired' AS reason FROM workflows w
       WHERE w.state IN ('processing', 'compensating') AND w.lease_expires_at < now()
     UNION ALL
     SELECT w.*, r.reason FROM workflows w
       JOIN (SELECT DISTINCT t.workflow_id,
                    CASE t.purpose WHEN 'deadline' THEN 'deadline_passed' WHEN 'callback' THEN 'callback_overdue'
                                   ELSE t.purpose || '_overdue' END AS reason
             FROM timers t WHERE t.fire_at < now()) r ON r.workflow_id = w.id
       WHERE w.state = 'waiting'
     UNION ALL
     SELECT w.*, 'pending_too_long' FROM workflows w
       WHERE (w.state = 'pending' OR (w.state = 'compensating' AND w.lease_expires_at IS NULL)
              OR (w.state = 'waiting' AND w.wakes IS NOT NULL))
         AND w.run_at < now() - $1::float8 * interval '1 millisecond'
     ORDER BY updated_at LIMIT $2) w
     ORDER BY w.updated_at`,
    [args.pendingForMs, args.limit ?? 100],
  );
  return res.rows.map(toListed);
}
