import { type Stored, toStored, type WorkflowRow } from './rows.ts';
import type { Client } from './tx.ts';

/**
 * Leases up to `limit` runnable instances across all environments (run as the scheduler role):
 * pending ones whose time has come, compensating ones and woken waiting ones nobody holds, and
 * instances whose holder's lease expired (the holder is then fenced out: row_version moves on).
 * A woken instance stays `waiting` until its claimer applies the wake-up. SKIP LOCKED lets many
 * workers claim side by side without waiting on each other.
 */
export async function claimWorkflows(c: Client, args: { limit: number; leaseMs: number }): Promise<Stored[]> {
  const res = await c.query<WorkflowRow>(
    `WITH runnable AS (
       SELECT id FROM workflows
       WHERE (state IN ('pending', 'compensating') OR (state = 'waiting' AND wakes IS NOT NULL))
         AND run_at <= statement_timestamp()
         AND (lease_expires_at IS NULL OR lease_expires_at < statement_timestamp())
       ORDER BY run_at LIMIT $1
       FOR NO KEY UPDATE SKIP LOCKED
     ), orphaned AS (
       SELECT id FROM workflows
       WHERE state = 'processing' AND lease_expires_at < statement_timestamp()
       ORDER BY lease_expires_at LIMIT $1
       FOR NO KEY UPDATE SKIP LOCKED
     ), c AS (
       SELECT id FROM runnable UNION ALL SELECT id FROM orphaned LIMIT $1
     )
     UPDATE workflows w
     SET state = CASE WHEN w.state IN ('compensating', 'waiting') THEN w.state ELSE 'processing' END,
         lease_token = gen_random_uuid(),
         lease_expires_at = now() + $2::float8 * interval '1 millisecond',
         row_version = w.row_version + 1
     FROM c WHERE w.id = c.id
     RETURNING w.*`,
    [args.limit, args.leaseMs],
  );
  return res.rows.map(toStored);
}

/** Extends a held lease; false when the lease was lost (the caller must stop working on it). */
export async function heartbeat(c: Client, args: { id: string; token: string; leaseMs: number }): Promise<boolean> {
  const res = await c.query(
    `UPDATE workflows SET lease_expires_at = now() + $3::float8 * interval '1 millisecond'
     WHERE id = $1 AND lease_token = $2`,
    [args.id, args.token, args.leaseMs],
  );
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
