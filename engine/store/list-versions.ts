import type { Client } from './tx.ts';

export interface VersionRow {
  logicId: string;
  version: number;
  hash: string;
  active: boolean;
  publishedAt: string;
  /** Instances pinned to this version that have not reached a terminal state. */
  inFlight: number;
}

interface Row {
  logic_id: string;
  version: number;
  hash: string;
  active: boolean;
  published_at: Date;
  in_flight: number;
}

// the states that have not ended, as the partial index workflows_live (migration 0004) lists them
const SELECT = `
  SELECT lv.logic_id, lv.version, lv.hash, lv.active, lv.published_at,
         (SELECT count(*)::int FROM workflows w
          WHERE w.logic_id = lv.logic_id AND w.version = lv.version AND w.state IN ('pending', 'processing', 'waiting', 'compensating')) AS in_flight
  FROM logic_versions lv`;

/** Every version published in the caller's env, by logicId then version. */
export async function listVersions(c: Client): Promise<VersionRow[]> {
  const res = await c.query<Row>(`${SELECT} ORDER BY lv.logic_id, lv.version`);
  return res.rows.map(toVersionRow);
}

/** One version of the caller's env, or null. */
export async function findVersionRow(c: Client, logicId: string, version: number): Promise<VersionRow | null> {
  const res = await c.query<Row>(`${SELECT} WHERE lv.logic_id = $1 AND lv.version = $2`, [logicId, version]);
  return res.rows[0] === undefined ? null : toVersionRow(res.rows[0]);
}

function toVersionRow(r: Row): VersionRow {
  return {
    logicId: r.logic_id,
    version: r.version,
    hash: r.hash,
    active: r.active,
    publishedAt: r.published_at.toISOString(),
    inFlight: r.in_flight,
  };
}
