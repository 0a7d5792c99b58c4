import { advanceOutbox } from './outbox.ts';
import type { Client, Queryable } from './tx.ts';

export interface FiredTimers {
  fired: number;
  /** How long until the next timer not yet due falls due (≤ 0: it is due by now); null when none is set. */
  nextDueMs: number | null;
  /** Due timers left unfired because a worker held their instance: due again once it lets go (migration 0015). */
  passedOver: number;
}

/**
 * Fires up to `limit` due timers in one statement (`fire_due_timers()`, migration 0003): marks
 * them fired and records on each instance what woke it, so a worker claims it and applies the
 * wake-up. SKIP LOCKED lets several pollers share a burst without firing a timer twice. "Due" is
 * judged by the database clock at the statement's start. The function takes the scheduler role
 * itself: pass the pool, and a poll is one round trip.
 */
export async function fireDueTimers(on: Queryable, limit: number): Promise<FiredTimers> {
  const res = await on.query<{ fired: number; next_due_ms: number | null; passed_over: number }>({
    name: 'flow_fire_timers',
    text: 'SELECT * FROM fire_due_timers($1)',
    values: [limit],
  });
  const row = res.rows[0]!;
  return { fired: row.fired, nextDueMs: row.next_due_ms, passedOver: row.passed_over };
}

/** Test clock: moves every pending timer, backoff and outbox retry `ms` closer, as if that much time passed. */
export async function advanceClock(c: Client, ms: number): Promise<void> {
  await c.query(`UPDATE timers SET fire_at = fire_at - $1::float8 * interval '1 millisecond'`, [ms]);
  await c.query(
    `UPDATE workflows SET run_at = run_at - $1::float8 * interval '1 millisecond' WHERE state IN ('pending', 'compensating')`,
    [ms],
  );
  await advanceOutbox(c, ms);
}
