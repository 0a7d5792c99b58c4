import { type Stored, toStored, type WorkflowRow } from './rows.ts';
import type { Client, Queryable } from './tx.ts';

/**
 * Leases up to `limit` runnable instances across all environments: pending ones whose time has
 * come, compensating ones and woken waiting ones nobody holds, and instances whose holder's lease
 * expired (the holder is then fenced out: row_version moves on). A woken instance stays `waiting`
 * until its claimer applies the wake-up. SKIP LOCKED lets many workers claim side by side without
 * waiting on each other. `claim_workflows()` (migration 0003) takes the scheduler role itself, so
 * pass the pool: a claim is one round trip.
 */
export async function claimWorkflows(on: Queryable, args: { limit: number; leaseMs: number }): Promise<Stored[]> {
  // named, as the heartbeat: prepared once per connection, sent by every worker again and again;
  // each row comes with its outputs (migration 0011)
  const res = await on.query<WorkflowRow>({
    name: 'flow_claim',
    text: 'SELECT (c.wf).*, c.outputs FROM claim_workflows($1, $2) c',
    values: [args.limit, args.leaseMs],
  });
  return res.rows.map(toStored);
}

/** Extends a held lease; false when the lease was lost (the caller must stop working on it). */
export async function heartbeat(c: Client, args: { id: string; token: string; leaseMs: number }): Promise<boolean> {
  const res = await c.query({
    name: 'flow_heartbeat',
    text: `UPDATE workflows SET lease_expires_at = now() + $3::float8 * interval '1 millisecond' WHERE id = $1 AND lease_token = $2`,
    values: [args.id, args.token, args.leaseMs],
  });
  return res.rowCount === 1;
}

/**
 * Lets go of a woken instance whose wakes changed nothing (stale, or children still running):
 * they are spent, the instance waits on. Guarded by row_version: a wake fired after a lost lease
 * ran out is not dropped. False when the guard matched no row.
 */
export async function releaseWakes(c: Client, args: { id: string; rowVersion: number }): Promise<boolean> {
  const res = await c.query(
    `UPDATE workflows SET wakes = NULL, lease_token = NULL, lease_expires_at = NULL, row_version = row_version + 1
     WHERE id = $1 AND row_version = $2 AND state = 'waiting'`,
    [args.id, args.rowVersion],
  );
  return res.rowCount === 1;
}
