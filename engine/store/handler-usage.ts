import type { LogicVersion } from '../../contracts/logic-version.ts';
import type { Client } from './tx.ts';

export interface VersionWithLive {
  doc: LogicVersion;
  active: boolean;
  /** Instances of the version that have not ended, by state. */
  live: Record<string, number>;
}

/**
 * Every version of the caller's env with its document, and its instances that have not ended by
 * state: one query, the counts read through the partial index of live instances (migration 0004).
 */
export async function versionsWithLive(c: Client): Promise<VersionWithLive[]> {
  const res = await c.query<{ doc: LogicVersion; active: boolean; live: Record<string, number> }>(
    `SELECT lv.doc, lv.active,
            coalesce((SELECT jsonb_object_agg(s.state, s.n) FROM (
                        SELECT w.state, count(*)::int AS n FROM workflows w
                        WHERE w.logic_id = lv.logic_id AND w.version = lv.version
                          AND w.state IN ('pending', 'processing', 'waiting', 'compensating')
                        GROUP BY w.state) s), '{}'::jsonb) AS live
     FROM logic_versions lv ORDER BY lv.logic_id, lv.version`,
  );
  return res.rows;
}
