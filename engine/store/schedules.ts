import type { ScheduleOverlap } from '../../contracts/index.ts';
import type { Client, Queryable } from './tx.ts';

/** A schedule row (migration 0029). */
export interface ScheduleRow {
  env: string;
  id: string;
  logicId: string;
  origin: 'declared' | 'api';
  cron: string;
  timezone: string;
  overlap: ScheduleOverlap;
  catchUp: string;
  input: unknown;
  paused: boolean;
  nextAt: Date | null;
  bufferedAt: Date | null;
  lastInstanceId: string | null;
  createdAt: Date;
  updatedAt: Date;
}

/** What defines a schedule; the rest of its row is its progress. */
export type ScheduleSpec = Pick<ScheduleRow, 'id' | 'logicId' | 'origin' | 'cron' | 'timezone' | 'overlap' | 'catchUp' | 'input'>;

const COLUMNS = `env_id AS env, id, logic_id AS "logicId", origin, cron, timezone, overlap, catch_up AS "catchUp", input, paused,
  next_at AS "nextAt", buffered_at AS "bufferedAt", last_instance_id AS "lastInstanceId", created_at AS "createdAt", updated_at AS "updatedAt"`;

export async function findSchedule(c: Client, id: string, lock: 'none' | 'update' | 'skip-locked' = 'none'): Promise<ScheduleRow | null> {
  const suffix = lock === 'update' ? ' FOR UPDATE' : lock === 'skip-locked' ? ' FOR UPDATE SKIP LOCKED' : '';
  const res = await c.query<ScheduleRow>(`SELECT ${COLUMNS} FROM schedules WHERE id = $1${suffix}`, [id]);
  return res.rows[0] ?? null;
}

export async function listSchedules(c: Client, logicId?: string): Promise<ScheduleRow[]> {
  const res = await c.query<ScheduleRow>(`SELECT ${COLUMNS} FROM schedules WHERE ($1::text IS NULL OR logic_id = $1) ORDER BY id`, [logicId ?? null]);
  return res.rows;
}

/** Inserts a schedule; false when one with its id exists. */
export async function insertSchedule(c: Client, env: string, s: ScheduleSpec, nextAt: Date | null): Promise<boolean> {
  const res = await c.query(
    `INSERT INTO schedules (env_id, id, logic_id, origin, cron, timezone, overlap, catch_up, input, next_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (env_id, id) DO NOTHING`,
    [env, s.id, s.logicId, s.origin, s.cron, s.timezone, s.overlap, s.catchUp, JSON.stringify(s.input ?? null), nextAt],
  );
  return res.rowCount === 1;
}

/** Redefines a schedule in place, keeping whether it is paused and what it last started. */
export async function redefineSchedule(c: Client, s: ScheduleSpec, nextAt: Date | null): Promise<void> {
  await c.query(
    `UPDATE schedules SET cron = $2, timezone = $3, overlap = $4, catch_up = $5, input = $6, next_at = $7, updated_at = now() WHERE id = $1`,
    [s.id, s.cron, s.timezone, s.overlap, s.catchUp, JSON.stringify(s.input ?? null), nextAt],
  );
}

export async function deleteSchedule(c: Client, id: string): Promise<void> {
  await c.query('DELETE FROM schedules WHERE id = $1', [id]);
}

/** Moves a schedule on after a round of ticks, or pauses/resumes it. */
export async function updateProgress(
  c: Client,
  id: string,
  p: { nextAt: Date | null; bufferedAt: Date | null; lastInstanceId: string | null; paused?: boolean },
): Promise<void> {
  await c.query(
    `UPDATE schedules SET next_at = $2, buffered_at = $3, last_instance_id = $4, paused = coalesce($5, paused), updated_at = now() WHERE id = $1`,
    [id, p.nextAt, p.bufferedAt, p.lastInstanceId, p.paused ?? null],
  );
}

/**
 * Schedules with work now, across envs (as the scheduler): a tick due by `now`, or a tick held by
 * `buffer_one` whose instance has ended (in a `terminal` state, or gone). With them, how long until the next tick of any
 * other schedule (null: none). The two partial indexes (migration 0029) keep this a short
 * lookup however many schedules exist.
 */
export async function dueSchedules(on: Queryable, now: Date | null, limit: number, terminal: readonly string[]): Promise<{ due: { env: string; id: string }[]; nextDueMs: number | null }> {
  const res = await on.query<{ env: string | null; id: string | null; next_ms: number | null }>(
    `WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
     (SELECT env_id AS env, id, NULL::float8 AS next_ms FROM schedules WHERE NOT paused AND next_at <= (SELECT now FROM t) ORDER BY next_at LIMIT $2)
     UNION ALL
     (SELECT s.env_id, s.id, NULL FROM schedules s LEFT JOIN workflows w ON w.id = s.last_instance_id
      WHERE NOT s.paused AND s.buffered_at IS NOT NULL AND (w.id IS NULL OR w.state = ANY($3::text[])) LIMIT $2)
     UNION ALL
     -- the next tick by the same index (an aggregate would read every row)
     SELECT NULL, NULL, extract(epoch FROM n.next_at - (SELECT now FROM t)) * 1000
     FROM (SELECT next_at FROM schedules WHERE NOT paused AND next_at > (SELECT now FROM t) ORDER BY next_at LIMIT 1) n`,
    [now, limit, terminal],
  );
  const due = new Map<string, { env: string; id: string }>();
  for (const r of res.rows) if (r.env !== null && r.id !== null) due.set(JSON.stringify([r.env, r.id]), { env: r.env, id: r.id });
  return { due: [...due.values()], nextDueMs: res.rows.find((r) => r.env === null)?.next_ms ?? null };
}

export type TickOutcomeRow = 'started' | 'skipped_catch_up' | 'skipped_overlap' | 'buffered' | 'failed';

export interface TickRow {
  tickAt: Date;
  outcome: TickOutcomeRow;
  via: 'timer' | 'trigger' | 'backfill';
  workflowId: string | null;
  error: { code: string; message: string } | null;
  recordedAt: Date;
}

/** Records what a tick did; a tick recorded before (buffered, then started) takes the new outcome. */
export async function recordTick(c: Client, env: string, scheduleId: string, t: Omit<TickRow, 'recordedAt'>): Promise<void> {
  await c.query(
    `INSERT INTO schedule_ticks (env_id, schedule_id, tick_at, outcome, via, workflow_id, error) VALUES ($1, $2, $3, $4, $5, $6, $7)
     ON CONFLICT (env_id, schedule_id, tick_at) DO UPDATE SET outcome = EXCLUDED.outcome, via = EXCLUDED.via,
       workflow_id = coalesce(EXCLUDED.workflow_id, schedule_ticks.workflow_id), error = EXCLUDED.error, recorded_at = now()`,
    [env, scheduleId, t.tickAt, t.outcome, t.via, t.workflowId, t.error === null ? null : JSON.stringify(t.error)],
  );
}

/** A schedule's ticks, newest first. */
export async function listTicks(c: Client, scheduleId: string, limit: number): Promise<TickRow[]> {
  const res = await c.query<TickRow>(
    `SELECT tick_at AS "tickAt", outcome, via, workflow_id AS "workflowId", error, recorded_at AS "recordedAt"
     FROM schedule_ticks WHERE schedule_id = $1 ORDER BY tick_at DESC LIMIT $2`,
    [scheduleId, limit],
  );
  return res.rows;
}

/** Of `ticks`, those that started an instance, with it (a backfill's dry run). */
export async function startedTicks(c: Client, scheduleId: string, ticks: readonly Date[]): Promise<Map<number, string | null>> {
  const res = await c.query<{ tickAt: Date; workflowId: string | null }>(
    `SELECT tick_at AS "tickAt", workflow_id AS "workflowId" FROM schedule_ticks
     WHERE schedule_id = $1 AND tick_at = ANY($2::timestamptz[]) AND outcome = 'started'`,
    [scheduleId, ticks],
  );
  return new Map(res.rows.map((r) => [r.tickAt.getTime(), r.workflowId]));
}

export async function deleteTicks(c: Client, scheduleId: string): Promise<void> {
  await c.query('DELETE FROM schedule_ticks WHERE schedule_id = $1', [scheduleId]);
}

/** Whether the instance has not reached a terminal state (a missing one has ended). */
export async function instanceRunning(c: Client, id: string | null, terminal: ReadonlySet<string>): Promise<boolean> {
  if (id === null) return false;
  const res = await c.query<{ state: string }>('SELECT state FROM workflows WHERE id = $1', [id]);
  const state = res.rows[0]?.state;
  return state !== undefined && !terminal.has(state);
}

/** An audit row about a schedule: created, paused, resumed, deleted, triggered, backfilled. */
export async function insertScheduleAudit(
  c: Client,
  e: { env: string; scheduleId: string; verb: string; actor: string; reason: string | null; args: unknown; before: unknown; after: unknown },
): Promise<void> {
  await c.query(
    `INSERT INTO audit (env_id, schedule_id, verb, actor, reason, args, before, after) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [e.env, e.scheduleId, e.verb, e.actor, e.reason, JSON.stringify(e.args ?? {}), JSON.stringify(e.before), JSON.stringify(e.after)],
  );
}
