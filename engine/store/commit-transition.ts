import { isAllowedTransition } from '../../contracts/index.ts';
import type { Transition } from '../core/transition.ts';
import { TransitionRefused } from './errors.ts';
import type { Stored } from './rows.ts';
import type { Client } from './tx.ts';
import { effectsParams, effectsSql } from './write-effects.ts';

export interface CommitOptions {
  /** Keep (and extend) the lease: this worker goes straight on with the next prepared attempt. */
  keepLease: { token: string; ttlMs: number } | null;
}

/**
 * Writes a transition as ONE statement: the workflow row (guarded by its row_version — the fence
 * that shuts out a worker whose lease was taken, and a verb that lost a race) and, joined to it,
 * the step_runs rows, outbox rows and timers. Returns false when the guard matched no row: the
 * caller lost and must re-read; nothing was written.
 */
export async function commitTransition(c: Client, from: Stored, t: Transition, opts: CommitOptions): Promise<boolean> {
  const to = t.instance;
  if (!isAllowedTransition(from.instance.state, t.cause, to.state)) {
    throw new TransitionRefused(to.id, from.instance.state, t.cause, to.state);
  }
  const runnable = (to.state === 'pending' || to.state === 'compensating') && opts.keepLease === null;
  const sql = `
  WITH w AS (
    UPDATE workflows SET state = $3, output = $4, current_step = $5, error = $6, generation = $7, ctx = $8,
      row_version = row_version + 1, updated_at = now(),
      run_at = now() + coalesce($9::float8, 0) * interval '1 millisecond',
      lease_token = $10::uuid,
      lease_expires_at = CASE WHEN $10::uuid IS NULL THEN NULL ELSE now() + $11::float8 * interval '1 millisecond' END
    WHERE id = $1 AND row_version = $2 AND state = $12
    RETURNING id, env_id
  ),${effectsSql({ inserts: 13, finishes: 14, outbox: 15, timers: 16 })},
  nt AS (SELECT pg_notify('flow_work', '') FROM w WHERE $17::boolean),
  -- an instance that has ended waits for nothing: drop its unfired timers
  clr AS (DELETE FROM timers t USING w WHERE t.workflow_id = w.id AND t.fired_at IS NULL
          AND $3 IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered'))
  SELECT (SELECT count(*) FROM w)::int AS n, (SELECT count(*) FROM nt) AS notified`;
  const res = await c.query<{ n: number }>(sql, [
    to.id,
    from.rowVersion,
    to.state,
    JSON.stringify(to.output),
    to.currentStep,
    to.error === null ? null : JSON.stringify(to.error),
    to.generation,
    JSON.stringify(to.ctx),
    t.runAfterMs,
    opts.keepLease?.token ?? null,
    opts.keepLease?.ttlMs ?? 0,
    from.instance.state,
    ...effectsParams(t),
    runnable,
  ]);
  return res.rows[0]!.n === 1;
}
