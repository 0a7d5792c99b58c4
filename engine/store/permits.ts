import type { Client, Queryable } from './tx.ts';

/**
 * One permit an attempt needs (migration 0027): a resource in a scope (an env, or `*` for every
 * env), the key within it (`''` for a handler), and the limit configuration or the LogicVersion
 * declares. An override set through the API replaces the limit in SQL.
 */
export interface PermitNeed {
  scope: string;
  resource: string;
  key: string;
  concurrency: number | null;
  rate: number | null;
  burst: number | null;
  /** Held until the instance ends (a workflow's per-key limit), not just for one attempt. */
  workflowWide: boolean;
}

/** Why an attempt waits: the resource without room, and for a rate, when its paid token exists. */
export interface PermitWait {
  scope: string;
  resource: string;
  /** Milliseconds until the token paid for exists; null: until a release wakes it. */
  wakeInMs: number | null;
}

/** What taking permits answered: granted (`wait` null), or the instance waits, and on what. */
export interface Acquired {
  wait: PermitWait | null;
  /** Whether anyone waited on the permits taken: their release must then wake them. */
  waiters: boolean;
}

/** A row of acquire_permits(): the resource it waits on (null: all granted), and `waiters`. */
export interface AcquireRow {
  scope: string | null;
  resource: string | null;
  wait_ms: number | null;
  waiters: boolean | null;
}

/** Reads a row of acquire_permits() (none: nothing was needed). */
export function acquiredFrom(row: AcquireRow | undefined): Acquired {
  if (row === undefined || row.resource === null) return { wait: null, waiters: row?.waiters ?? false };
  return { wait: { scope: row.scope!, resource: row.resource, wakeInMs: row.wait_ms === null ? null : Math.max(0, Number(row.wait_ms)) }, waiters: true };
}

/** The needs as acquire_permits() reads them (and a commit carries them, migration 0037). */
export function needsParam(needs: readonly PermitNeed[]) {
  return needs.map((n) => ({ s: n.scope, r: n.resource, k: n.key, c: n.concurrency, rate: n.rate, burst: n.burst, w: n.workflowWide }));
}

/**
 * Takes every permit the attempt needs, or none: then the instance waits, its lease let go (by
 * this statement), and `wait` says on what. The lease (token, row version) is the claim's.
 */
export async function acquirePermits(on: Queryable, args: { id: string; token: string; rowVersion: number; needs: PermitNeed[] }): Promise<Acquired> {
  const res = await on.query<AcquireRow>({
    name: 'flow_acquire_permits',
    text: 'SELECT scope, resource, wait_ms, waiters FROM acquire_permits($1, $2, $3, $4)',
    values: [args.id, args.token, args.rowVersion, JSON.stringify(needsParam(args.needs))],
  });
  return acquiredFrom(res.rows[0]);
}

/** Wakes the waiters an instance's permits (its workflow-wide ones too once it `ended`) held back. */
export async function releasePermits(on: Queryable, args: { id: string; ended: boolean }): Promise<number> {
  const res = await on.query<{ n: number }>({ name: 'flow_release_permits', text: 'SELECT release_permits($1, $2) AS n', values: [args.id, args.ended] });
  return res.rows[0]?.n ?? 0;
}

/** Drops dead permits and offers every resource with waiters its room: what crashes and cancels leave. */
export async function sweepPermits(on: Queryable): Promise<number> {
  const res = await on.query<{ n: number }>({ name: 'flow_sweep_permits', text: 'SELECT sweep_permits() AS n' });
  return res.rows[0]?.n ?? 0;
}

/** Room a bucket lent an engine (migration 0053): null slots or tokens where its limit has no cap or rate. */
export interface Loan {
  id: string;
  slots: number | null;
  tokens: number | null;
}

/** Borrows room from a need's bucket for `ttlMs`; null where lending would leave its limit close to reached. */
export async function lendAllowance(c: Client, args: { need: PermitNeed; slots: number; tokens: number; ttlMs: number }): Promise<Loan | null> {
  const res = await c.query<{ id: string; slots: number | null; tokens: number | null }>({
    name: 'flow_lend_allowance',
    text: 'SELECT id, slots, tokens FROM lend_allowance($1, $2, $3, $4)',
    values: [JSON.stringify(needsParam([args.need])[0]), args.slots, args.tokens, args.ttlMs],
  });
  const row = res.rows[0];
  return row === undefined ? null : { id: row.id, slots: row.slots, tokens: row.tokens === null ? null : Number(row.tokens) };
}

/** Keeps loans another `ttlMs`; answers the ids kept (the others are gone, or lent before their limit changed). */
export async function keepAllowances(c: Client, ids: string[], ttlMs: number): Promise<Set<string>> {
  const res = await c.query<{ id: string }>({ name: 'flow_keep_allowances', text: 'SELECT keep_allowances($1, $2) AS id', values: [ids, ttlMs] });
  return new Set(res.rows.map((r) => r.id));
}

/** Gives loans back: their room returns to the buckets, and waiters are offered it. */
export async function returnAllowances(c: Client, ids: string[]): Promise<void> {
  await c.query({ name: 'flow_return_allowances', text: 'SELECT return_allowances($1)', values: [ids] });
}

/** A limit set through the API: it replaces configuration for its resource in its scope. */
export interface LimitOverride {
  scope: string;
  resource: string;
  concurrency: number | null;
  rate: number | null;
  burst: number | null;
  updatedBy: string;
  updatedAt: Date;
}

interface OverrideRow {
  env_id: string;
  resource: string;
  concurrency: number | null;
  rate: number | null;
  burst: number | null;
  updated_by: string;
  updated_at: Date;
}

const toOverride = (r: OverrideRow): LimitOverride => ({
  scope: r.env_id,
  resource: r.resource,
  concurrency: r.concurrency,
  rate: r.rate === null ? null : Number(r.rate),
  burst: r.burst,
  updatedBy: r.updated_by,
  updatedAt: r.updated_at,
});

/** Every override, in every scope (the scheduler's read: engines keep them to know what is limited). */
export async function listOverrides(c: Client): Promise<LimitOverride[]> {
  const res = await c.query<OverrideRow>('SELECT * FROM limit_overrides ORDER BY env_id, resource');
  return res.rows.map(toOverride);
}

/**
 * Sets (or, with `limit` null, removes) the override of a resource and applies it to the work
 * waiting on it in the same transaction; returns the override it replaced.
 */
export async function putOverride(
  c: Client,
  args: { scope: string; resource: string; limit: { concurrency: number | null; rate: number | null; burst: number | null } | null; actor: string },
): Promise<LimitOverride | null> {
  const before = await c.query<OverrideRow>('SELECT * FROM limit_overrides WHERE env_id = $1 AND resource = $2 FOR UPDATE', [args.scope, args.resource]);
  if (args.limit === null) {
    await c.query('DELETE FROM limit_overrides WHERE env_id = $1 AND resource = $2', [args.scope, args.resource]);
  } else {
    await c.query(
      `INSERT INTO limit_overrides (env_id, resource, concurrency, rate, burst, updated_by) VALUES ($1, $2, $3, $4, $5, $6)
       ON CONFLICT (env_id, resource) DO UPDATE SET concurrency = excluded.concurrency, rate = excluded.rate, burst = excluded.burst,
         updated_by = excluded.updated_by, updated_at = now()`,
      [args.scope, args.resource, args.limit.concurrency, args.limit.rate, args.limit.burst, args.actor],
    );
  }
  await c.query('SELECT apply_limit_change($1, $2)', [args.scope, args.resource]);
  return before.rows[0] === undefined ? null : toOverride(before.rows[0]);
}

/** One resource's load: permits held, instances waiting, and the calls let through in the last minute. */
export interface LimitLoad {
  scope: string;
  resource: string;
  key: string;
  inFlight: number;
  waiting: number;
}

/** What every limited resource holds and what waits on it, in the scopes given (an env and `*`). */
export async function limitLoads(c: Client, scopes: string[] | null): Promise<LimitLoad[]> {
  const res = await c.query<{ env_id: string; resource: string; key: string; in_flight: string; waiting: string }>(
    `WITH held AS (
       SELECT x.env_id, x.resource, x.key, sum(x.n) AS n FROM (
         SELECT p.env_id, p.resource, p.key, 1 AS n FROM permits p JOIN workflows w ON w.id = p.workflow_id
         WHERE permit_alive(p, w) AND ($1::text[] IS NULL OR p.env_id = ANY($1))
         -- room lent to engines (migration 0053) is held as a permit is: its calls are at most that
         UNION ALL
         SELECT b.env_id, b.resource, b.key, b.lent_slots FROM limit_buckets b
         WHERE b.lent_slots > 0 AND ($1::text[] IS NULL OR b.env_id = ANY($1))
       ) x GROUP BY 1, 2, 3
     ), queued AS (
       SELECT q.env_id, q.resource, q.key, count(*) AS n FROM permit_waiters q
       WHERE $1::text[] IS NULL OR q.env_id = ANY($1) GROUP BY 1, 2, 3
     )
     SELECT coalesce(h.env_id, q.env_id) AS env_id, coalesce(h.resource, q.resource) AS resource, coalesce(h.key, q.key) AS key,
            coalesce(h.n, 0) AS in_flight, coalesce(q.n, 0) AS waiting
     FROM held h FULL JOIN queued q ON q.env_id = h.env_id AND q.resource = h.resource AND q.key = h.key
     ORDER BY 1, 2, 3`,
    [scopes],
  );
  return res.rows.map((r) => ({ scope: r.env_id, resource: r.resource, key: r.key, inFlight: Number(r.in_flight), waiting: Number(r.waiting) }));
}

/** An instance of `env` waiting for a permit, and on what. */
export interface PermitWaiter {
  workflowId: string;
  scope: string;
  resource: string;
  key: string;
  /** `concurrency`: no room, until a release wakes it; `rate`: its token exists at `dueAt`. */
  reason: 'concurrency' | 'rate';
  dueAt: Date | null;
  since: Date;
}

/** The instances of `env` waiting for a permit, oldest first, optionally on one resource. */
export async function listWaiters(c: Client, args: { env: string; resource?: string; limit: number }): Promise<PermitWaiter[]> {
  const res = await c.query<{ workflow_id: string; env_id: string; resource: string; key: string; kind: 'concurrency' | 'rate'; due_at: Date | null; since: Date }>(
    `SELECT q.workflow_id, q.env_id, q.resource, q.key, q.kind, q.due_at, q.since
     FROM permit_waiters q JOIN workflows w ON w.id = q.workflow_id
     WHERE w.env_id = $1 AND ($2::text IS NULL OR q.resource = $2) ORDER BY q.id LIMIT $3`,
    [args.env, args.resource ?? null, args.limit],
  );
  return res.rows.map((r) => ({ workflowId: r.workflow_id, scope: r.env_id, resource: r.resource, key: r.key, reason: r.kind, dueAt: r.due_at, since: r.since }));
}
