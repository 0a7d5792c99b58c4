import { canonicalJson, DEFAULTS, type FlowError, type LogicVersion, TERMINAL_STATES } from '../../contracts/index.ts';
import { durationMs } from '../core/durations.ts';
import { cronOf, nextTick, planTicks, ticksBetween } from '../core/schedule-ticks.ts';
import { ScheduleDeclared, ScheduleExists, ScheduleInvalid } from '../errors.ts';
import type { Db } from '../store/db.ts';
import { NotFound, VersionRetired } from '../store/errors.ts';
import { findStartableVersion } from '../store/find-startable-version.ts';
import {
  deleteSchedule,
  deleteTicks,
  dueSchedules,
  findSchedule,
  insertSchedule,
  insertScheduleAudit,
  instanceRunning,
  listSchedules,
  listTicks,
  recordTick,
  startedTicks,
  redefineSchedule,
  type ScheduleRow,
  type ScheduleSpec,
  type TickRow,
  updateProgress,
} from '../store/schedules.ts';
import { asScheduler, type Client, inEnv } from '../store/tx.ts';
import type { LogicCache } from './logic-cache.ts';
import type { FlowLogger } from './log.ts';
import { startPinned } from './start-instance.ts';

/** Ticks handled per schedule per round: a long outage of a frequent schedule takes a few rounds. */
const TICKS_PER_ROUND = 500;
/** Schedules fired per poll. */
const DUE_BATCH = 100;
const TERMINAL = [...TERMINAL_STATES];
/** The most ticks one backfill may cover. */
export const BACKFILL_MAX_TICKS = 1000;

/** A schedule as the API shows it: its definition, its state and its next tick. */
export type Schedule = Omit<ScheduleRow, 'env'>;

export interface ScheduleDetail extends Schedule {
  /** Its latest ticks, newest first: what each started or why it was skipped. */
  ticks: TickRow[];
}

export interface ScheduleActor {
  actor: string;
  reason?: string | null;
}

/** A schedule an operator creates through the API; the defaults are those of a declared one. */
export interface CreateScheduleSpec {
  id: string;
  logicId: string;
  cron: string;
  timezone?: string;
  overlap?: ScheduleRow['overlap'];
  catchUp?: string;
  input?: unknown;
}

export interface BackfillResult {
  dryRun: boolean;
  /** Each tick in the range, with the instance it started (or had started before: `created` false). */
  ticks: { tickAt: Date; workflowId: string | null; created: boolean }[];
}

/**
 * Starting instances on cron schedules (ARCHITECTURE.md, Data model: `schedules`). A schedule is
 * one row whose `next_at` is its next tick; the worker pool's timer loop calls `fireDue()`, which
 * looks up due rows through a partial index, so schedules cost nothing between ticks. Each tick
 * starts its instance through the start path of the API (`startPinned`) with the idempotency key
 * `schedule:<id>:<tick ISO time>`, inside the transaction that holds the schedule's row lock and
 * moves `next_at` on: with any number of engine processes, each tick starts one instance.
 *
 * Time is the database's `now()` unless a clock is given (tests move a manual one).
 */
export class Schedules {
  constructor(
    private readonly db: Db,
    private readonly logics: LogicCache,
    private readonly opts: { clock?: (() => Date) | undefined; onStarted?: () => void; onError?: (err: unknown) => void; log?: FlowLogger } = {},
  ) {}

  async #now(c: Client): Promise<Date> {
    if (this.opts.clock !== undefined) return this.opts.clock();
    return (await c.query<{ now: Date }>('SELECT now() AS now')).rows[0]!.now;
  }

  /**
   * Brings the schedules a definition declares in line with its highest active version, inside
   * that version's publish or retire transaction: new ones are created, changed ones redefined
   * (kept paused if they were), dropped ones deleted; with no active version left, all of them
   * go. Their id is `<logicId>:<name>`.
   */
  async syncDeclared(c: Client, env: string, logicId: string): Promise<void> {
    const active = await findStartableVersion(c, logicId, undefined);
    const declared = active?.active ? declaredSpecs(active.doc) : [];
    const now = await this.#now(c);
    const existing = new Map((await listSchedules(c, logicId)).filter((s) => s.origin === 'declared').map((s) => [s.id, s]));
    for (const spec of declared) {
      const before = existing.get(spec.id);
      existing.delete(spec.id);
      if (before === undefined) {
        if (!(await insertSchedule(c, env, spec, firstTick(spec, now)))) throw new ScheduleExists(spec.id);
      } else if (!sameDefinition(before, spec)) {
        await redefineSchedule(c, spec, firstTick(spec, now));
      }
    }
    for (const gone of existing.keys()) {
      await deleteSchedule(c, gone);
      await deleteTicks(c, gone);
    }
  }

  async create(env: string, spec: CreateScheduleSpec, by: ScheduleActor): Promise<Schedule> {
    if (!/^[a-z0-9][a-z0-9_.:-]{0,127}$/.test(spec.id)) throw new ScheduleInvalid(`id "${spec.id}" must match ^[a-z0-9][a-z0-9_.:-]{0,127}$`);
    const full: ScheduleSpec = {
      id: spec.id,
      logicId: spec.logicId,
      origin: 'api',
      cron: spec.cron,
      timezone: spec.timezone ?? DEFAULTS.schedule.timezone,
      overlap: spec.overlap ?? DEFAULTS.schedule.overlap,
      catchUp: spec.catchUp ?? DEFAULTS.schedule.catchUp,
      input: spec.input ?? null,
    };
    checkSpec(full);
    return inEnv(this.db, env, async (c) => {
      const version = await findStartableVersion(c, spec.logicId, undefined);
      if (version === null) throw new NotFound(`LogicVersion ${spec.logicId}`);
      if (!(await insertSchedule(c, env, full, firstTick(full, await this.#now(c))))) throw new ScheduleExists(spec.id);
      await this.#audit(c, env, spec.id, 'schedule.create', by, { ...full }, null, { paused: false });
      return strip((await findSchedule(c, spec.id))!);
    });
  }

  list(env: string): Promise<Schedule[]> {
    return inEnv(this.db, env, async (c) => (await listSchedules(c)).map(strip));
  }

  async get(env: string, id: string, ticks = 50): Promise<ScheduleDetail> {
    return inEnv(this.db, env, async (c) => {
      const row = await found(c, id);
      return { ...strip(row), ticks: await listTicks(c, id, ticks) };
    });
  }

  /** Pauses (no tick fires; those that fall due meanwhile are not caught up) or resumes a schedule. */
  setPaused(env: string, id: string, paused: boolean, by: ScheduleActor): Promise<Schedule> {
    return inEnv(this.db, env, async (c) => {
      const row = await found(c, id, 'update');
      if (row.paused !== paused) {
        // a resumed schedule starts again from its next tick after now: what fell due while it was paused is not owed
        const nextAt = paused ? row.nextAt : firstTick(row, await this.#now(c));
        await updateProgress(c, id, { nextAt, bufferedAt: paused ? null : row.bufferedAt, lastInstanceId: row.lastInstanceId, paused });
        await this.#audit(c, env, id, paused ? 'schedule.pause' : 'schedule.resume', by, {}, { paused: row.paused }, { paused });
      }
      return strip((await findSchedule(c, id))!);
    });
  }

  async remove(env: string, id: string, by: ScheduleActor): Promise<void> {
    await inEnv(this.db, env, async (c) => {
      const row = await found(c, id, 'update');
      if (row.origin === 'declared') throw new ScheduleDeclared(id);
      await deleteSchedule(c, id);
      await deleteTicks(c, id);
      await this.#audit(c, env, id, 'schedule.delete', by, {}, strip(row), null);
    });
  }

  /** Starts one instance now, whatever the overlap rule says: the operator asked for it. */
  async trigger(env: string, id: string, by: ScheduleActor): Promise<{ workflowId: string; tickAt: Date }> {
    const result = await inEnv(this.db, env, async (c) => {
      const row = await found(c, id, 'update');
      const tickAt = await this.#now(c);
      const started = await this.#startTick(c, env, row, tickAt);
      await recordTick(c, env, id, { tickAt, outcome: 'started', via: 'trigger', workflowId: started.id, error: null });
      await updateProgress(c, id, { nextAt: row.nextAt, bufferedAt: row.bufferedAt, lastInstanceId: started.id });
      await this.#audit(c, env, id, 'schedule.trigger', by, { tickAt }, null, { workflowId: started.id });
      return { workflowId: started.id, tickAt };
    });
    this.opts.onStarted?.();
    return result;
  }

  /**
   * The ticks of [from, to] (past ticks only), each started with the idempotency key its timer
   * would have used: a tick that already started (on time, or by an earlier backfill) starts
   * nothing new. A dry run starts nothing and lists what would start. Overlap and catch-up do not
   * apply: the operator names the range.
   */
  async backfill(env: string, id: string, range: { from: Date; to: Date; dryRun: boolean }, by: ScheduleActor): Promise<BackfillResult> {
    const result = await inEnv(this.db, env, async (c) => {
      const row = await found(c, id, range.dryRun ? 'none' : 'update');
      const now = await this.#now(c);
      const to = new Date(Math.min(range.to.getTime(), now.getTime()));
      const cron = cronOf(row.cron, row.timezone);
      // the range is inclusive of `from`: ticks after the instant just before it
      const ticks = ticksBetween(cron, new Date(range.from.getTime() - 1), to, BACKFILL_MAX_TICKS + 1);
      if (ticks.length > BACKFILL_MAX_TICKS) throw new ScheduleInvalid(`the range holds more than ${BACKFILL_MAX_TICKS} ticks: backfill it in parts`);
      if (range.dryRun) {
        const done = await startedTicks(c, id, ticks);
        return { dryRun: true, ticks: ticks.map((tickAt) => ({ tickAt, workflowId: done.get(tickAt.getTime()) ?? null, created: !done.has(tickAt.getTime()) })) };
      }
      const out: BackfillResult['ticks'] = [];
      for (const tickAt of ticks) {
        const started = await this.#startTick(c, env, row, tickAt);
        if (started.created) await recordTick(c, env, id, { tickAt, outcome: 'started', via: 'backfill', workflowId: started.id, error: null });
        out.push({ tickAt, workflowId: started.id, created: started.created });
      }
      const created = out.filter((t) => t.created).length;
      await this.#audit(c, env, id, 'schedule.backfill', by, { from: range.from, to: range.to }, null, { ticks: out.length, created });
      return { dryRun: false, ticks: out };
    });
    if (result.ticks.some((t) => t.created)) this.opts.onStarted?.();
    return result;
  }

  /**
   * Fires every schedule with a due tick. Each goes in its own transaction of its env, holding
   * its row (SKIP LOCKED: another process firing it is left to it, and the row it commits has
   * moved on). Returns how many schedules fired and how long until the next tick is due.
   */
  async fireDue(): Promise<{ fired: number; nextDueMs: number | null }> {
    // without a clock the statement reads the database's now() itself: one round trip a poll
    const { due, nextDueMs } = await asScheduler(this.db, (c) => dueSchedules(c, this.opts.clock?.() ?? null, DUE_BATCH, TERMINAL));
    let fired = 0;
    let started = 0;
    for (const { env, id } of due) {
      try {
        const n = await inEnv(this.db, env, (c) => this.#fireOne(c, env, id));
        if (n !== null) fired++;
        started += n ?? 0;
      } catch (err) {
        this.opts.onError?.(err);
      }
    }
    if (started > 0) this.opts.onStarted?.();
    return { fired, nextDueMs: due.length >= DUE_BATCH ? 0 : nextDueMs };
  }

  /** One schedule's due ticks; null when another process holds it or it is no longer due. */
  async #fireOne(c: Client, env: string, id: string): Promise<number | null> {
    const row = await findSchedule(c, id, 'skip-locked');
    if (row === null || row.paused) return null;
    const now = await this.#now(c);
    const dueNow = row.nextAt !== null && row.nextAt <= now;
    if (!dueNow && row.bufferedAt === null) return null;
    const running = await instanceRunning(c, row.lastInstanceId, TERMINAL_STATES);
    if (!dueNow && running) return null;
    const cron = cronOf(row.cron, row.timezone);
    const due = dueNow ? [row.nextAt!, ...ticksBetween(cron, row.nextAt!, now, TICKS_PER_ROUND - 1)] : [];
    const { plans, buffered } = planTicks(due, now, {
      overlap: row.overlap,
      catchUpMs: durationMs(row.catchUp),
      previousRunning: running,
      buffered: row.bufferedAt,
    });
    let last = row.lastInstanceId;
    let started = 0;
    for (const plan of plans) {
      this.opts.log?.info({ env, scheduleId: id, logicId: row.logicId, tickAt: plan.tick.toISOString(), outcome: plan.outcome }, 'schedule tick');
      if (plan.outcome !== 'started') {
        await recordTick(c, env, id, { tickAt: plan.tick, outcome: plan.outcome, via: 'timer', workflowId: null, error: null });
        continue;
      }
      try {
        const s = await this.#startTick(c, env, row, plan.tick);
        last = s.id;
        started++;
        await recordTick(c, env, id, { tickAt: plan.tick, outcome: 'started', via: 'timer', workflowId: s.id, error: null });
      } catch (err) {
        // refused before anything was written (no active version, an input the schema refuses): the tick is recorded as failed
        const e = err as FlowError;
        if (typeof e.code !== 'string' || !e.code.startsWith('FLOW_')) throw err;
        await recordTick(c, env, id, { tickAt: plan.tick, outcome: 'failed', via: 'timer', workflowId: null, error: { code: e.code, message: e.message } });
      }
    }
    const lastDue = due.at(-1);
    const nextAt = lastDue === undefined ? row.nextAt : nextTick(cron, lastDue);
    await updateProgress(c, id, { nextAt, bufferedAt: buffered, lastInstanceId: last });
    return started;
  }

  /** The start path of the API, keyed by the schedule and the tick. */
  async #startTick(c: Client, env: string, row: ScheduleRow, tickAt: Date): Promise<{ id: string; created: boolean }> {
    const found = await findStartableVersion(c, row.logicId, undefined);
    if (found === null) throw new NotFound(`LogicVersion ${row.logicId}`);
    if (!found.active) throw new VersionRetired(row.logicId, undefined);
    return startPinned(c, this.logics, found.doc, {
      env,
      input: row.input ?? {},
      correlationId: null,
      idempotencyKey: scheduleKey(row.id, tickAt),
      callbackUrl: null,
    });
  }

  #audit(c: Client, env: string, scheduleId: string, verb: string, by: ScheduleActor, args: unknown, before: unknown, after: unknown) {
    return insertScheduleAudit(c, { env, scheduleId, verb, actor: by.actor, reason: by.reason ?? null, args, before, after });
  }
}

/** The start's idempotency key of a schedule's tick: the same on every process and in a backfill. */
export function scheduleKey(id: string, tickAt: Date): string {
  return `schedule:${id}:${tickAt.toISOString()}`;
}

/** The schedules a version declares, defaults filled in, each checked. */
export function declaredSpecs(logic: LogicVersion): ScheduleSpec[] {
  const specs = (logic.schedules ?? []).map((s, i) => {
    const name = s.name ?? DEFAULTS.schedule.name(i);
    const spec: ScheduleSpec = {
      id: `${logic.logicId}:${name}`,
      logicId: logic.logicId,
      origin: 'declared',
      cron: s.cron,
      timezone: s.timezone ?? DEFAULTS.schedule.timezone,
      overlap: s.overlap ?? DEFAULTS.schedule.overlap,
      catchUp: s.catchUp ?? DEFAULTS.schedule.catchUp,
      input: s.input ?? null,
    };
    checkSpec(spec);
    return spec;
  });
  const ids = specs.map((s) => s.id);
  const twice = ids.find((id, i) => ids.indexOf(id) !== i);
  if (twice !== undefined) throw new ScheduleInvalid(`${logic.logicId}@${logic.version} declares schedule ${twice} twice: name them apart`);
  return specs;
}

/** Refuses a pattern, zone or catch-up window that cannot be used. */
export function checkSpec(s: Pick<ScheduleSpec, 'cron' | 'timezone' | 'catchUp'>): void {
  cronOf(s.cron, s.timezone);
  try {
    durationMs(s.catchUp);
  } catch {
    throw new ScheduleInvalid(`catchUp "${s.catchUp}" is not an ISO 8601 duration such as PT5M or P1D`);
  }
}

function firstTick(s: Pick<ScheduleSpec, 'cron' | 'timezone'>, now: Date): Date | null {
  return nextTick(cronOf(s.cron, s.timezone), now);
}

function sameDefinition(a: ScheduleSpec, b: ScheduleSpec): boolean {
  return (
    a.cron === b.cron &&
    a.timezone === b.timezone &&
    a.overlap === b.overlap &&
    a.catchUp === b.catchUp &&
    canonicalJson(a.input ?? null) === canonicalJson(b.input ?? null)
  );
}

async function found(c: Client, id: string, lock: 'none' | 'update' = 'none'): Promise<ScheduleRow> {
  const row = await findSchedule(c, id, lock);
  if (row === null) throw new NotFound(`schedule ${id}`);
  return row;
}

function strip(row: ScheduleRow): Schedule {
  const { env: _env, ...rest } = row;
  return rest;
}
