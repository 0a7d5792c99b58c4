import { OPERATOR_GRANT, type PublisherGrant, sameGrant, type VouchEntry } from '../../contracts/grants.ts';
import type { LogicVersion } from '../../contracts/index.ts';
import { VersionConflict } from './errors.ts';
import type { Client } from './tx.ts';

/**
 * Publishes a LogicVersion into the env under the publisher's grant (migration 0019). Publishing
 * the same (logicId, version) again is a no-op when the hash matches and is refused when it does
 * not: a published version never changes. The same hash published under another grant (already
 * checked to cover the version) appends that grant: it is the one in force from then on.
 * Returns true when the row was new.
 */
export async function publishLogicVersion(c: Client, env: string, doc: LogicVersion, grant: PublisherGrant = OPERATOR_GRANT): Promise<boolean> {
  const entry = JSON.stringify({ subject: grant.subject, scopes: grant.scopes });
  const res = await c.query<{ hash: string; inserted: boolean; grants: VouchEntry[] }>(
    `WITH ins AS (
       INSERT INTO logic_versions (env_id, logic_id, version, hash, doc, grants)
       VALUES ($1, $2, $3, $4, $5, jsonb_build_array($6::jsonb || jsonb_build_object('at', now())))
       ON CONFLICT (env_id, logic_id, version) DO NOTHING RETURNING hash
     )
     SELECT hash, true AS inserted, '[]'::jsonb AS grants FROM ins
     UNION ALL
     SELECT hash, false, grants FROM logic_versions WHERE env_id = $1 AND logic_id = $2 AND version = $3 AND NOT EXISTS (SELECT 1 FROM ins)`,
    [env, doc.logicId, doc.version, doc.hash, JSON.stringify(doc), entry],
  );
  const row = res.rows[0]!;
  if (row.hash !== doc.hash) throw new VersionConflict(doc.logicId, doc.version, row.hash, doc.hash);
  if (row.inserted && doc.triggers !== undefined) {
    await c.query(
      `INSERT INTO triggers (env_id, event, logic_id) SELECT $1, e, $2 FROM unnest($3::text[]) AS e ON CONFLICT DO NOTHING`,
      [env, doc.logicId, doc.triggers.map((t) => t.event)],
    );
  }
  if (row.inserted) return true;
  const last = row.grants.at(-1);
  if (last !== undefined && sameGrant(last, grant)) return false;
  await c.query(
    `UPDATE logic_versions SET grants = grants || jsonb_build_array($4::jsonb || jsonb_build_object('at', now()))
     WHERE env_id = $1 AND logic_id = $2 AND version = $3`,
    [env, doc.logicId, doc.version, entry],
  );
  return false;
}

/** The grants that vouched for the version with `hash` in the caller's env, oldest first; null when no such version. */
export async function findVouches(c: Client, hash: string): Promise<{ logicId: string; vouched: VouchEntry[] } | null> {
  const res = await c.query<{ logic_id: string; grants: VouchEntry[] }>('SELECT logic_id, grants FROM logic_versions WHERE hash = $1 LIMIT 1', [hash]);
  const row = res.rows[0];
  return row === undefined ? null : { logicId: row.logic_id, vouched: row.grants };
}

/** Whether a published version is active (not retired); null when there is no such version. */
export async function isVersionActive(c: Client, logicId: string, version: number): Promise<boolean | null> {
  const res = await c.query<{ active: boolean }>('SELECT active FROM logic_versions WHERE logic_id = $1 AND version = $2', [logicId, version]);
  return res.rows[0]?.active ?? null;
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
