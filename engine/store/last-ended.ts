import type { Client } from './tx.ts';

/**
 * The ids of the last `k` instances of `logicId@version` in the caller's env that have ended,
 * newest first (by when they started). Walks the env's listing index newest first and
 * stops at the k-th match, so it reads little while the version has recent ended instances.
 */
export async function lastEnded(c: Client, logicId: string, version: number, k: number): Promise<string[]> {
  const res = await c.query<{ id: string }>(
    `SELECT id FROM workflows
     WHERE logic_id = $1 AND version = $2 AND state IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered')
     ORDER BY created_at DESC, id DESC LIMIT $3`,
    [logicId, version, k],
  );
  return res.rows.map((r) => r.id);
}
