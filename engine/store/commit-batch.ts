import type { Queryable } from './tx.ts';

/**
 * Commits many instances' transitions in one statement and one transaction (migration 0012):
 * `params` are commit_journaled()'s parameters, JSON each, applied in order. Answers each row's
 * count: 1 committed, 0 fenced (its row_version or state moved; nothing of it was written). A row
 * that raises fails the whole statement and nothing of the batch is written.
 */
export async function commitBatch(q: Queryable, params: readonly string[]): Promise<number[]> {
  // named: each connection parses and plans it once; the rows are joined as text, not re-encoded
  const res = await q.query<{ ns: number[] }>({ name: 'flow_commit_batch', text: 'SELECT commit_batch($1::jsonb) AS ns', values: [`[${params.join(',')}]`] });
  return res.rows[0]!.ns;
}
