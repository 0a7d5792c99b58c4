import { type Acquired, acquiredFrom, type AcquireRow, needsParam, type PermitNeed } from './permits.ts';
import type { Queryable } from './tx.ts';

/**
 * What a commit answered: its row count (1 committed, 0 fenced), and, when it carried the
 * permits of the instance's next attempt (migration 0037), whether they were taken or the
 * instance now waits for them (its lease let go).
 */
export interface CommitReceipt {
  n: number;
  permits: Acquired | null;
}

/**
 * Commits many instances' transitions in one statement and one transaction (migrations 0012,
 * 0037, 0038): `params` are commit_journaled()'s parameters, JSON each, applied in order, each one
 * with a `permits` key followed by acquire_permits() for its next attempt; or acquireParam()'s
 * elements, which commit nothing and only take permits. Answers each row's receipt.
 * A row that raises fails the whole statement and nothing of the batch is written. So does a
 * batch whose limits looked slack and were not by its end (migration 0041); `lockFirst` sends
 * it again in the way that cannot fail so, its limits' buckets locked before its first row.
 */
export async function commitBatch(q: Queryable, params: readonly string[], lockFirst = false): Promise<CommitReceipt[]> {
  // named: each connection parses and plans it once; the rows are joined as text, not re-encoded
  const res = await q.query<AcquireRow & { n: number }>({
    name: 'flow_commit_batch',
    text: 'SELECT n, scope, resource, wait_ms, waiters FROM commit_batch($1::jsonb, $2)',
    values: [`[${params.join(',')}]`, lockFirst],
  });
  return res.rows.map((row) => ({ n: row.n, permits: row.waiters === null ? null : acquiredFrom(row) }));
}

/**
 * A batch element that commits nothing and takes the permits of the attempt a claim's lease is
 * about to run, as acquire_permits() would (migration 0038): its receipt's `permits` is the answer.
 */
export function acquireParam(args: { id: string; token: string; rowVersion: number; needs: readonly PermitNeed[] }): string {
  return JSON.stringify({ acquireOnly: true, id: args.id, leaseToken: args.token, rowVersion: args.rowVersion, permits: needsParam(args.needs) });
}
