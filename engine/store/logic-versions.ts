import type { LogicVersion } from '../../contracts/index.ts';
import { VersionConflict } from './errors.ts';
import type { Client } from './tx.ts';

/**
 * Publishes a LogicVersion into the env. Publishing the same (logicId, version) again is a no-op
 * when the hash matches and is refused when it does not: a published version never changes.
 * Returns true when it was new.
 */
export async function publishLogicVersion(c: Client, env: string, doc: LogicVersion): Promise<boolean> {
  const res = await c.query<{ hash: string; inserted: boolean }>(
    `WITH ins AS (
       INSERT INTO logic_versions (env_id, logic_id, version, hash, doc) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (env_id, logic_id, version) DO NOTHING RETURNING hash
     )
     SELECT hash, true AS inserted FROM ins
     UNION ALL
     SELECT hash, false FROM logic_versions WHERE env_id = $1 AND logic_id = $2 AND version = $3 AND NOT EXISTS (SELECT 1 FROM ins)`,
    [env, doc.logicId, doc.version, doc.hash, JSON.stringify(doc)],
  );
  const row = res.rows[0]!;
  if (row.hash !== doc.hash) throw new VersionConflict(doc.logicId, doc.version, row.hash, doc.hash);
  if (row.inserted && doc.triggers !== undefined) {
    await c.query(
      `INSERT INTO triggers (env_id, event, logic_id) SELECT $1, e, $2 FROM unnest($3::text[]) AS e ON CONFLICT DO NOTHING`,
      [env, doc.logicId, doc.triggers.map((t) => t.event)],
    );
  }
  return row.inserted;
}

/** A version by number, or the active one (the highest published) when `version` is omitted. */
export async function findLogicVersion(c: Client, logicId: string, version?: number): Promise<LogicVersion | null> {
  const res =
    version === undefined
      ? await c.query<{ doc: LogicVersion }>('SELECT doc FROM logic_versions WHERE logic_id = $1 ORDER BY version DESC LIMIT 1', [logicId])
      : await c.query<{ doc: LogicVersion }>('SELECT doc FROM logic_versions WHERE logic_id = $1 AND version = $2', [logicId, version]);
  return res.rows[0]?.doc ?? null;
}

export async function findLogicVersionByHash(c: Client, hash: string): Promise<LogicVersion | null> {
  const res = await c.query<{ doc: LogicVersion }>('SELECT doc FROM logic_versions WHERE hash = $1 LIMIT 1', [hash]);
  return res.rows[0]?.doc ?? null;
}
