import type { RowFacts } from '../core/migrate.ts';
import type { Client } from './tx.ts';

/**
 * What a move needs to know of an instance's row beyond the instance (core/migrate.ts, RowFacts),
 * read under the database clock. The caller holds the row lock, so no worker can claim the
 * instance between this read and the move: a claim takes the same lock.
 */
export async function migrationFacts(c: Client, id: string): Promise<RowFacts> {
  const res = await c.query<{ held: boolean; messages: string[] }>(
    `SELECT coalesce(w.lease_expires_at > now(), false) AS held,
            coalesce((SELECT array_agg(DISTINCT m.name ORDER BY m.name) FROM workflow_messages m WHERE m.workflow_id = w.id AND m.state = 'buffered'), '{}') AS messages
       FROM workflows w WHERE w.id = $1`,
    [id],
  );
  const row = res.rows[0];
  return { held: row?.held ?? false, messages: row?.messages ?? [] };
}
