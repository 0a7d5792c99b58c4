import { setTimeout as sleep } from 'node:timers/promises';
import { TERMINAL_STATES } from '../../contracts/index.ts';
import type { Db } from '../../engine/store/db.ts';

/**
 * Invariant queries over a test schema, read as the connecting (owner) user. They hold for any
 * run of the engine, however its workers were killed, paused or raced by verbs.
 */

/** Retries a query of the test itself while the server is away (a restart); fails after `timeoutMs`. */
export async function retrying<T>(fn: () => Promise<T>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(100);
    }
  }
}

/** Polls `probe` until it returns a value other than undefined; fails after `timeoutMs` with `what`. */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  opts: { timeoutMs?: number; intervalMs?: number; explain?: () => Promise<string> } = {},
): Promise<T> {
  const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${opts.explain ? `: ${await opts.explain()}` : ''}`);
    await sleep(opts.intervalMs ?? 50);
  }
}

/** Instances per state. */
export async function stateCounts(db: Db): Promise<Record<string, number>> {
  const res = await db.pool.query<{ state: string; n: number }>('SELECT state, count(*)::int AS n FROM workflows GROUP BY state ORDER BY state');
  return Object.fromEntries(res.rows.map((r) => [r.state, r.n]));
}

/** Resolves once no instance is runnable or running (every one terminal or parked). */
export async function waitUntilAtRest(db: Db, opts: { timeoutMs?: number; allowWaiting?: boolean } = {}): Promise<Record<string, number>> {
  return waitFor(
    'every instance to be terminal',
    async () => {
      const counts = await stateCounts(db);
      const busy = Object.keys(counts).filter((s) => !TERMINAL_STATES.has(s as never) && !(opts.allowWaiting && s === 'waiting'));
      return busy.length === 0 ? counts : undefined;
    },
    { timeoutMs: opts.timeoutMs ?? 60_000, intervalMs: 100 },
  );
}

/** Did the store already commit a success for this idempotency key? (A call arriving now would re-run it.) */
export async function committedSuccess(db: Db, key: string, kind: 'step' | 'compensation'): Promise<boolean> {
  const res = await db.pool.query(`SELECT 1 FROM step_runs WHERE idempotency_key = $1 AND kind = $2 AND state = 'succeeded' LIMIT 1`, [key, kind]);
  return (res.rowCount ?? 0) > 0;
}

export interface StepRunRow {
  workflow_id: string;
  seq: number;
  step: string;
  kind: 'step' | 'compensation';
  attempt: number;
  generation: number;
  state: string;
  idempotency_key: string | null;
}

export async function stepRuns(db: Db): Promise<StepRunRow[]> {
  const res = await db.pool.query<StepRunRow>(
    'SELECT workflow_id, seq, step, kind, attempt, generation, state, idempotency_key FROM step_runs ORDER BY workflow_id, seq',
  );
  return res.rows;
}

/**
 * Breaches of "each attempt is committed at most once", as readable lines (empty when none):
 * - two rows for one attempt (same key, kind and attempt number);
 * - two succeeded rows for one key;
 * - an attempt prepared after its key had already succeeded (a committed step run again);
 * - an attempt still open (`running` or `parked`) on an instance that has ended.
 */
export async function attemptViolations(db: Db): Promise<string[]> {
  const res = await db.pool.query<{ problem: string }>(`
    SELECT 'two rows for attempt ' || idempotency_key || '#' || attempt || ' (' || kind || ')' AS problem
      FROM step_runs WHERE idempotency_key IS NOT NULL
      GROUP BY workflow_id, kind, idempotency_key, attempt HAVING count(*) > 1
    UNION ALL
    SELECT 'two successes for ' || idempotency_key || ' (' || kind || ')'
      FROM step_runs WHERE idempotency_key IS NOT NULL AND state = 'succeeded'
      GROUP BY workflow_id, kind, idempotency_key HAVING count(*) > 1
    UNION ALL
    SELECT 'attempt ' || later.idempotency_key || '#' || later.attempt || ' prepared after the key succeeded'
      FROM step_runs ok JOIN step_runs later
        ON later.workflow_id = ok.workflow_id AND later.kind = ok.kind AND later.idempotency_key = ok.idempotency_key
       AND later.seq > ok.seq
     WHERE ok.state = 'succeeded' AND ok.idempotency_key IS NOT NULL
    UNION ALL
    SELECT 'attempt ' || s.step || '#' || s.attempt || ' still ' || s.state || ' in ' || w.state || ' instance ' || w.id
      FROM step_runs s JOIN workflows w ON w.id = s.workflow_id
     WHERE s.state IN ('running', 'parked') AND w.state IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered')`);
  return res.rows.map((r) => r.problem);
}

/** Keys of the effect attempts (steps and compensations) the store holds as succeeded, sorted as JS sorts. */
export async function succeededKeys(db: Db): Promise<string[]> {
  const res = await db.pool.query<{ k: string }>(`SELECT idempotency_key AS k FROM step_runs WHERE state = 'succeeded' AND idempotency_key IS NOT NULL`);
  // sorted here, not by the server: its collation need not agree with Array.prototype.sort
  return res.rows.map((r) => r.k).sort();
}
