import pg from 'pg';
import type { Client } from './tx.ts';

/** How long ended instances are kept: the env's figure, else the default; null keeps them for ever. */
export interface RetentionDays {
  /** Days for envs without a figure of their own. (Default: null, kept for ever) */
  days: number | null;
  /** Days per env, overriding `days`. */
  envDays: Readonly<Record<string, number>>;
}

/** One UTC week of history: its instances, how many retention may remove, and whether its partitions exist. */
export interface HistoryWeek {
  /** The week's Monday, `YYYYMMDD`: the suffix of its partitions' names. */
  week: string;
  lo: Date;
  hi: Date;
  instances: number;
  expiring: number;
  /** The week has partitions of its own (else its rows sit in the default partition). */
  partitioned: boolean;
}

/** How many weeks ahead of now the engine keeps partitions ready, so no commit lands in the default. */
export const PARTITIONS_AHEAD_DAYS = 14;

/**
 * An instance retention may remove (alias `w`; `$1` the default days, `$2` the env days as JSON):
 * ended, not on legal hold, and last changed longer ago than its definition's `retention.days`,
 * else its env's, else the default. Without any figure it is kept (make_interval of NULL is NULL).
 */
export const EXPIRING_W = `w.state IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered')
  AND NOT EXISTS (SELECT 1 FROM legal_holds h WHERE h.workflow_id = w.id)
  AND w.updated_at < now() - make_interval(days => coalesce(
    (SELECT (lv.doc #>> '{retention,days}')::int FROM logic_versions lv
     WHERE lv.env_id = w.env_id AND lv.logic_id = w.logic_id AND lv.version = w.version),
    ($2::jsonb ->> w.env_id)::int, $1::int))`;

export function retentionParams(r: RetentionDays): [number | null, string] {
  return [r.days, JSON.stringify(r.envDays)];
}

/** Creates the week partitions from `since`'s week through PARTITIONS_AHEAD_DAYS from now; answers how many. */
export async function ensurePartitions(c: Client, since: Date = new Date()): Promise<number> {
  const res = await c.query<{ n: number }>(
    `SELECT ensure_history_partitions($1, now() + make_interval(days => $2)) AS n`,
    [since, PARTITIONS_AHEAD_DAYS],
  );
  return res.rows[0]?.n ?? 0;
}

/** Every week that has instances or partitions, oldest first (one pass over workflows). */
export async function historyWeeks(c: Client, r: RetentionDays): Promise<HistoryWeek[]> {
  const res = await c.query<{ week: string; lo: Date; instances: string; expiring: string; partitioned: boolean }>(
    `WITH w AS (
       SELECT date_trunc('week', w.created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS lo, (${EXPIRING_W}) AS expiring
       FROM workflows w
     ), weeks AS (
       SELECT lo, count(*) AS instances, count(*) FILTER (WHERE expiring) AS expiring FROM w GROUP BY lo
       UNION ALL
       SELECT DISTINCT p.lo, 0, 0 FROM history_partitions() p
     )
     SELECT to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD') AS week, lo, sum(instances) AS instances, sum(expiring) AS expiring,
            EXISTS (SELECT 1 FROM history_partitions() p WHERE p.lo = weeks.lo) AS partitioned
     FROM weeks GROUP BY lo ORDER BY lo`,
    retentionParams(r),
  );
  return res.rows.map((w) => ({
    week: w.week,
    lo: w.lo,
    hi: new Date(w.lo.getTime() + 7 * 86_400_000),
    instances: Number(w.instances),
    expiring: Number(w.expiring),
    partitioned: w.partitioned,
  }));
}

/** A week whose partitions retention drops whole: past, partitioned, and every instance in it expiring. */
export function droppable(w: HistoryWeek, now: Date): boolean {
  return w.partitioned && w.hi.getTime() <= now.getTime() && w.instances === w.expiring;
}

/** The instances of one week that are expiring (to archive before they go), ids and envs. */
export async function expiringIn(c: Client, r: RetentionDays, lo: Date | null, hi: Date | null, limit: number): Promise<{ id: string; env: string; week: string }[]> {
  const res = await c.query<{ id: string; env_id: string; week: string }>(
    `SELECT w.id, w.env_id, to_char(date_trunc('week', w.created_at AT TIME ZONE 'UTC'), 'YYYYMMDD') AS week FROM workflows w
     WHERE (${EXPIRING_W}) AND ($3::timestamptz IS NULL OR (w.created_at >= $3 AND w.created_at < $4))
     ORDER BY w.created_at LIMIT $5`,
    [...retentionParams(r), lo, hi, limit],
  );
  return res.rows.map((w) => ({ id: w.id, env: w.env_id, week: w.week }));
}

/** The rows keyed by an instance that go with it, besides the history partitions (`gone`: the removed ids). */
const WITH_THE_REST = `
  ob AS (DELETE FROM outbox o USING gone WHERE o.workflow_id = gone.id AND (o.delivered_at IS NOT NULL OR o.failed_at IS NOT NULL)),
  au AS (DELETE FROM audit a USING gone WHERE a.workflow_id = gone.id)`;

/**
 * Removes every instance created in [lo, hi) (all expiring, as `historyWeeks` found) with its
 * outbox rows already delivered and its audit; outputs, timers and holds go by cascade. Answers
 * how many went: fewer than `expected` means one came back to life meanwhile (a verb), and the
 * caller must roll back rather than drop the week's partitions.
 */
export async function removeWeekInstances(c: Client, r: RetentionDays, lo: Date, hi: Date): Promise<number> {
  const res = await c.query<{ n: string }>(
    `WITH gone AS (DELETE FROM workflows w WHERE w.created_at >= $3 AND w.created_at < $4 AND (${EXPIRING_W}) RETURNING w.id),
     ${WITH_THE_REST}
     SELECT count(*) AS n FROM gone`,
    [...retentionParams(r), lo, hi],
  );
  return Number(res.rows[0]?.n ?? 0);
}

/** The instances still in [lo, hi): a week may only be dropped when none is left. */
export async function instancesIn(c: Client, lo: Date, hi: Date): Promise<number> {
  const res = await c.query<{ n: string }>('SELECT count(*) AS n FROM workflows WHERE created_at >= $1 AND created_at < $2', [lo, hi]);
  return Number(res.rows[0]?.n ?? 0);
}

/** Drops one week's partitions (as their owner); answers the names dropped. */
export async function dropWeek(c: Client, week: string): Promise<string[]> {
  const names = ['journal', 'step_runs'].map((t) => `${t}_p${week}`);
  for (const name of names) await c.query(`DROP TABLE IF EXISTS ${pg.escapeIdentifier(name)}`);
  return names;
}

/**
 * Removes up to `limit` expiring instances row by row — history rows found in their own week's
 * partition — with the rest of their rows; answers how many went. `ids`: only these.
 */
export async function removeInstances(c: Client, r: RetentionDays, ids: readonly string[]): Promise<number> {
  const res = await c.query<{ n: string }>(
    `WITH gone AS (DELETE FROM workflows w WHERE w.id = ANY($3::uuid[]) AND (${EXPIRING_W}) RETURNING w.id, w.created_at),
     j AS (DELETE FROM journal x USING gone WHERE x.workflow_id = gone.id AND x.born = gone.created_at),
     s AS (DELETE FROM step_runs x USING gone WHERE x.workflow_id = gone.id AND x.born = gone.created_at),
     ${WITH_THE_REST}
     SELECT count(*) AS n FROM gone`,
    [...retentionParams(r), ids],
  );
  return Number(res.rows[0]?.n ?? 0);
}

/** Bytes on disk of the tables retention shrinks (every history partition, indexes and TOAST included). */
export async function historyBytes(c: Client): Promise<number> {
  const res = await c.query<{ bytes: string }>(
    `SELECT coalesce(sum(pg_total_relation_size(t.relid)), 0) AS bytes FROM (
       SELECT relid FROM pg_partition_tree('journal') UNION ALL SELECT relid FROM pg_partition_tree('step_runs')
       UNION ALL SELECT 'workflows'::regclass UNION ALL SELECT 'workflow_outputs'::regclass
       UNION ALL SELECT 'outbox'::regclass UNION ALL SELECT 'audit'::regclass) t`,
  );
  return Number(res.rows[0]?.bytes ?? 0);
}

/** Bytes of one week's partitions: what dropping it frees. */
export async function weekBytes(c: Client, week: string): Promise<number> {
  const res = await c.query<{ bytes: string }>(
    `SELECT coalesce(sum(pg_total_relation_size(to_regclass(n))), 0) AS bytes FROM unnest($1::text[]) n WHERE to_regclass(n) IS NOT NULL`,
    [['journal', 'step_runs'].map((t) => pg.escapeIdentifier(`${t}_p${week}`))],
  );
  return Number(res.rows[0]?.bytes ?? 0);
}
