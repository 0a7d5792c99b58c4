import type { Db } from '../../engine/store/db.ts';
import { asScheduler } from '../../engine/store/tx.ts';

/**
 * Every row of every table of the store, as one digest per table (count and md5 of the rows in
 * a stable order), read as the scheduler so row-level security hides nothing. Two equal
 * snapshots mean nothing was written in between — not a row, not an audit entry.
 */
export async function snapshot(db: Db): Promise<Record<string, string>> {
  return asScheduler(db, async (c) => {
    const tables = await c.query<{ name: string }>(
      `SELECT table_name AS name FROM information_schema.tables
        WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND table_name <> 'schema_migrations' ORDER BY 1`,
    );
    const out: Record<string, string> = {};
    for (const { name } of tables.rows) {
      const q = c.escapeIdentifier(name);
      const r = await c.query<{ n: number; digest: string | null }>(
        `SELECT count(*)::int AS n, md5(string_agg(t::text, '|' ORDER BY t::text)) AS digest FROM ${q} t`,
      );
      out[name] = `${r.rows[0]!.n}:${r.rows[0]!.digest ?? '-'}`;
    }
    return out;
  });
}
