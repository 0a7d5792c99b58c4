import type { RowFacts } from '../core/migrate.ts';
import type { Client } from './tx.ts';

/**
 * What a move needs to know of an instance's row beyond the instance (core/migrate.ts, RowFacts),
 * read under the database clock. The caller holds the row lock, so no worker can claim the
 * instance between this read and the move: a claim takes the same lock.
 */
export async function migrationFacts(c: Client, id: string): Promise<RowFacts> {
  const res = await c.query<{ held: boolean }>('SELECT coalesce(lease_expires_at > now(), false) AS held FROM workflows WHERE id = $1', [id]);
  return { held: res.rows[0]?.held ?? false };
}
