import { advanceOutbox } from './outbox.ts';
import { type Stored, toStored, type WorkflowRow } from './rows.ts';
import type { Client, Queryable } from './tx.ts';

export interface FiredTimers {
  fired: number;
  /** How long until the next timer not yet due falls due (≤ 0: it is due by now); null when none is set. */
  nextDueMs: number | null;
  /** Due timers left unfired because a worker held their instance: due again once it lets go (migration 0015). */
  passedOver: number;
  /** The woken instances this poll leased, as claimWorkflows() returns them (migration 0016). */
  leased: Stored[];
  /** Instances woken and left unleased: any pool's claim takes them. */
  wokenLeft: number;
  /** SLA breaches this poll recorded (migration 0031), each once ever: for flow_sla_breaches_total. */
  breaches: SlaBreachFired[];
}

/** A breach recorded by an SLA timer; `step` null: the instance's own SLA. */
export interface SlaBreachFired {
  env: string;
  logicId: string;
  workflowId: string;
  step: string | null;
}

type FireRow = (WorkflowRow | { [K in keyof WorkflowRow]: null }) & {
  fired: number | null;
  next_due_ms: number | null;
  passed_over: number | null;
  woken_left: number | null;
  breaches: SlaBreachFired[] | null;
};

/**
 * Fires up to `limit` due timers in one statement (`fire_due_timers()`, migrations 0003, 0015,
 * 0016): marks them fired and records on each instance what woke it, so a worker claims it and
 * applies the wake-up. Of the instances it wakes, it leases up to `lease.limit` (those whose
 * timers fell due first) on the same terms as claimWorkflows() and returns them as it does: one
 * row version and no claim for those. SKIP LOCKED lets several pollers share a burst without
 * firing a timer twice or leasing an instance twice. "Due" is judged by the database clock at
 * the statement's start. The function takes the scheduler role itself: pass the pool, and a
 * poll is one round trip.
 */
export async function fireDueTimers(on: Queryable, limit: number, lease: { limit: number; leaseMs: number } = { limit: 0, leaseMs: 0 }): Promise<FiredTimers> {
  // the counts come in the row without an instance; each leased instance with its outputs (0011)
  const res = await on.query<FireRow>({
    name: 'flow_fire_timers',
    text: 'SELECT (f.wf).*, f.outputs, f.fired, f.next_due_ms, f.passed_over, f.woken_left, f.breaches FROM fire_due_timers($1, $2, $3) f',
    values: [limit, lease.limit, lease.leaseMs],
  });
  const counts = res.rows.find((r) => r.id === null)!;
  return {
    fired: counts.fired!,
    nextDueMs: counts.next_due_ms,
    passedOver: counts.passed_over!,
    leased: res.rows.filter((r): r is WorkflowRow & FireRow => r.id !== null).map(toStored),
    wokenLeft: counts.woken_left!,
    breaches: counts.breaches ?? [],
  };
}

/** Test clock: moves every pending timer, backoff and outbox retry `ms` closer, as if that much time passed. */
export async function advanceClock(c: Client, ms: number): Promise<void> {
  await c.query(`UPDATE timers SET fire_at = fire_at - $1::float8 * interval '1 millisecond'`, [ms]);
  await c.query(
    `UPDATE workflows SET run_at = run_at - $1::float8 * interval '1 millisecond' WHERE state IN ('pending', 'compensating')`,
    [ms],
  );
  await advanceOutbox(c, ms);
  await c.query(
    `UPDATE handler_circuits SET open_until = open_until - $1::float8 * interval '1 millisecond',
       probe_until = probe_until - $1::float8 * interval '1 millisecond' WHERE state = 'open'`,
    [ms],
  );
}
