import type { VouchEntry } from '../../contracts/grants.ts';
import type { LogicVersion } from '../../contracts/index.ts';
import type { Client } from './tx.ts';

/**
 * The version a new instance would pin: the one named, or else the highest active one — falling
 * back to the highest retired one only so the caller can say why it will not start (a retired
 * version is drained: nothing new starts on it). Null when the logicId has no such version.
 * With it, the grants that vouched for it (migration 0019).
 */
export async function findStartableVersion(
  c: Client,
  logicId: string,
  version?: number,
): Promise<{ doc: LogicVersion; active: boolean; grants: VouchEntry[] } | null> {
  const res = await c.query<{ doc: LogicVersion; active: boolean; grants: VouchEntry[] }>(
    `SELECT doc, active, grants FROM logic_versions WHERE logic_id = $1 AND ($2::int IS NULL OR version = $2)
     ORDER BY active DESC, version DESC LIMIT 1`,
    [logicId, version ?? null],
  );
  return res.rows[0] ?? null;
}
