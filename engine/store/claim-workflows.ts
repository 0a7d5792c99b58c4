import { type Stored, toStored, type WorkflowRow } from './rows.ts';
import type { Client, Queryable } from './tx.ts';

/** How many instances each env gets per turn of a claim; an env not named weighs 1 (FLOW_ENV_WEIGHTS). */
export type EnvWeights = Readonly<Record<string, number>>;

/**
 * Leases up to `limit` runnable instances across all environments: pending ones whose time has
 * come, compensating ones and woken waiting ones nobody holds, and instances whose holder's lease
 * expired (the holder is then fenced out: row_version moves on). A woken instance stays `waiting`
 * until its claimer applies the wake-up. SKIP LOCKED lets many workers claim side by side without
 * waiting on each other. `claim_workflows()` (engine/store/schema.sql) takes the scheduler role itself, so
 * pass the pool: a claim is one round trip. A timer poll grants a lease on the same terms to the
 * instances it wakes (migration 0016: fireDueTimers).
 */
export async function claimWorkflows(on: Queryable, args: { limit: number; leaseMs: number; weights?: EnvWeights; envs?: string[] }): Promise<Stored[]> {
  // named, as the heartbeat: prepared once per connection, sent by every worker again and again;
  // each row comes with its outputs (migration 0011); higher priorities first within an env, and
  // an env of weight w gets w instances per turn (migration 0028); with `envs`, only theirs (0048)
  const res = await on.query<WorkflowRow>({
    name: 'flow_claim',
    text: 'SELECT (c.wf).*, c.outputs FROM claim_workflows($1, $2, $3::jsonb, $4::text[]) c',
    values: [args.limit, args.leaseMs, JSON.stringify(args.weights ?? {}), args.envs ?? null],
  });
  return res.rows.map(toStored);
}

/**
 * Extends every lease a process holds, in one statement however many it holds; returns the ids
 * whose lease is no longer theirs (another token, or the row gone): their holders must stop. Rows
 * are locked in id order and a row locked right now is skipped, not waited for: it is being
 * written (most often by its holder's own commit, which extends or ends the lease itself), and
 * waiting could deadlock with a commit that locks several rows (a parent cancelling its
 * children). A skipped lease is extended at the next beat, well before it runs out.
 */
export async function heartbeats(c: Client, args: { ids: string[]; tokens: string[]; leaseMs: number }): Promise<Set<string>> {
  const res = await c.query<{ id: string }>({
    name: 'flow_heartbeats',
    text: `WITH held AS (SELECT * FROM unnest($1::uuid[], $2::uuid[]) AS h(id, token)),
           locked AS (SELECT w.id FROM workflows w JOIN held h ON h.id = w.id AND w.lease_token = h.token
                      ORDER BY w.id FOR UPDATE OF w SKIP LOCKED),
           beat AS (UPDATE workflows w SET lease_expires_at = now() + $3::float8 * interval '1 millisecond'
                    FROM locked WHERE w.id = locked.id RETURNING w.id)
           -- beat runs whether read or not (a data-modifying WITH always does); this reads the
           -- statement's snapshot, so a lease is lost only if it was gone before the beat
           SELECT h.id FROM held h LEFT JOIN workflows w ON w.id = h.id WHERE w.lease_token IS DISTINCT FROM h.token`,
    values: [args.ids, args.tokens, args.leaseMs],
  });
  return new Set(res.rows.map((r) => r.id));
}

/**
 * Lets go of a woken instance whose wakes changed nothing (stale, or children still running):
 * they are spent, the instance waits on. Guarded by row_version: a wake fired after a lost lease
 * ran out is not dropped. False when the guard matched no row. It writes the holder's receipt, as
 * a commit does (migration 0006): the lease is let go by its holder, not taken (no notice, 0018).
 */
export async function releaseWakes(c: Client, args: { id: string; rowVersion: number }): Promise<boolean> {
  const res = await c.query(
    `UPDATE workflows SET wakes = NULL, lease_token = NULL, lease_expires_at = NULL, row_version = row_version + 1,
       commit_token = lease_token, commit_version = row_version + 1
     WHERE id = $1 AND row_version = $2 AND state = 'waiting'`,
    [args.id, args.rowVersion],
  );
  return res.rowCount === 1;
}

/**
 * Lets a lease this process holds lapse now, writing nothing else: the instance is claimable at
 * once (as one whose holder died), and its claimer runs the prepared attempt again. For work
 * abandoned on shutdown that left nothing to commit (an unfinished module run).
 */
export async function letLeaseLapse(c: Client, args: { id: string; token: string }): Promise<void> {
  await c.query(`UPDATE workflows SET lease_expires_at = now() WHERE id = $1 AND lease_token = $2`, [args.id, args.token]);
}
