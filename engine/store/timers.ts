import { advanceOutbox } from './outbox.ts';
import type { Client } from './tx.ts';

export interface DueTimer {
  id: string;
  workflow_id: string;
  env_id: string;
  purpose: 'delay' | 'deadline' | 'children';
  payload: { seq: number };
}

/**
 * Locks up to `limit` due timers (database clock) for the caller's transaction and marks them
 * fired; SKIP LOCKED lets several pollers share the work without firing a timer twice. "Due" is
 * judged at the statement's start, not the transaction's: a timer written (with now()) by a
 * transaction that committed after ours began would otherwise look not yet due. The
 * caller applies each timer's transition in the same transaction, so a crash fires it again later
 * rather than never.
 */
export async function takeDueTimers(c: Client, limit: number): Promise<DueTimer[]> {
  const res = await c.query<DueTimer>(
    `UPDATE timers t SET fired_at = statement_timestamp()
     FROM (SELECT id FROM timers WHERE fired_at IS NULL AND fire_at <= statement_timestamp()
           ORDER BY fire_at LIMIT $1 FOR UPDATE SKIP LOCKED) due
     WHERE t.id = due.id
     RETURNING t.id, t.workflow_id, t.env_id, t.purpose, t.payload`,
    [limit],
  );
  return res.rows;
}

/** Test clock: moves every pending timer, backoff and outbox retry `ms` closer, as if that much time passed. */
export async function advanceClock(c: Client, ms: number): Promise<void> {
  await c.query(`UPDATE timers SET fire_at = fire_at - $1::float8 * interval '1 millisecond' WHERE fired_at IS NULL`, [ms]);
  await c.query(
    `UPDATE workflows SET run_at = run_at - $1::float8 * interval '1 millisecond' WHERE state IN ('pending', 'compensating')`,
    [ms],
  );
  await advanceOutbox(c, ms);
}
