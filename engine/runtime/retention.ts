import type { Db } from '../store/db.ts';
import {
  dropWeek,
  droppable,
  ensurePartitions,
  expiringIn,
  historyBytes,
  historyWeeks,
  instancesIn,
  removeInstances,
  removeWeekInstances,
  type RetentionDays,
  weekBytes,
} from '../store/retention.ts';
import type { Client } from '../store/tx.ts';
import { archiveInstances } from './archive.ts';
import { type FlowLogger, silentLogger } from './log.ts';

export interface RetentionOptions extends RetentionDays {
  /** Where ended instances are written as trace files before removal (FLOW_ARCHIVE_DIR). (Default: none, not archived) */
  archiveDir?: string | null;
  /** How often the scheduled run starts. (Default: one hour) */
  intervalMs?: number;
  /** Instances removed row by row per transaction. (Default: 1000) */
  batch?: number;
}

/** What one retention run did (or, dry, would do). */
export interface RetentionReport {
  dryRun: boolean;
  instancesRemoved: number;
  /** The partitions dropped whole, `journal_pYYYYMMDD` and `step_runs_pYYYYMMDD`. */
  partitionsDropped: string[];
  /** pg_total_relation_size of the history tables (every partition, workflows, outputs, outbox, audit). */
  bytesBefore: number;
  bytesAfter: number;
  /** bytesBefore − bytesAfter; dry: the size of the partitions a run would drop. */
  bytesFreed: number;
  /** The archive files written to. */
  archiveFiles: string[];
}

/**
 * Removes ended instances past their retention with all their rows (ARCHITECTURE.md, Data
 * model: history partitions). A week whose instances are all removable loses its partitions by
 * DROP, which gives the disk back at once; the others lose theirs by DELETE. One node at a time:
 * a session advisory lock per schema, taken without waiting. Runs on a schedule (`schedule()`)
 * and on demand (`run()`: the API, `s8flow retention run`).
 */
export class Retention {
  readonly #db: Db;
  readonly #opts: RetentionOptions;
  readonly #log: FlowLogger;
  #timer: NodeJS.Timeout | null = null;
  #running: Promise<unknown> | null = null;

  constructor(db: Db, opts: RetentionOptions, log: FlowLogger = silentLogger) {
    this.#db = db;
    this.#opts = opts;
    this.#log = log;
  }

  /** Answers null when another node holds the retention lock. */
  async run(o: { dryRun?: boolean } = {}): Promise<RetentionReport | null> {
    const client = await this.#db.pool.connect();
    const key = `sentin8-flow:retention:${this.#db.schema}`;
    try {
      const locked = await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock(hashtext($1)) AS ok', [key]);
      if (locked.rows[0]?.ok !== true) return null;
      try {
        return await this.#run(client, o.dryRun === true);
      } finally {
        await client.query('SELECT pg_advisory_unlock(hashtext($1))', [key]);
      }
    } finally {
      client.release();
    }
  }

  async #run(c: Client, dryRun: boolean): Promise<RetentionReport> {
    const days = { days: this.#opts.days, envDays: this.#opts.envDays };
    if (!dryRun) await tx(c, null, () => ensurePartitions(c));
    const bytesBefore = await historyBytes(c);
    const weeks = await tx(c, 'flow_engine', () => historyWeeks(c, days));
    const now = new Date();
    const report: RetentionReport = { dryRun, instancesRemoved: 0, partitionsDropped: [], bytesBefore, bytesAfter: bytesBefore, bytesFreed: 0, archiveFiles: [] };
    const files = new Set<string>();
    for (const w of weeks.filter((w) => droppable(w, now))) {
      if (dryRun) {
        report.instancesRemoved += w.instances;
        report.partitionsDropped.push(`journal_p${w.week}`, `step_runs_p${w.week}`);
        report.bytesFreed += await weekBytes(c, w.week);
        continue;
      }
      if (this.#opts.archiveDir) {
        const instances = await tx(c, 'flow_engine', () => expiringIn(c, days, w.lo, w.hi, Number.MAX_SAFE_INTEGER));
        for (const f of await archiveInstances(c, this.#opts.archiveDir, instances)) files.add(f);
      }
      // first the week's instances (all of them, or none if one came back to life meanwhile)...
      const removed = await tx(c, 'flow_engine', async () => {
        const n = await removeWeekInstances(c, days, w.lo, w.hi);
        if ((await instancesIn(c, w.lo, w.hi)) > 0) throw new WeekRevived();
        return n;
      }).catch((err: unknown) => {
        if (!(err instanceof WeekRevived)) throw err;
        this.#log.info({ week: w.week }, 'retention: an instance of the week is live again; its rows go one by one');
        return null;
      });
      if (removed === null) continue;
      report.instancesRemoved += removed;
      // ...then its partitions, whose DROP needs the parents to itself for a moment
      const names = await this.#dropWeek(c, w.week);
      if (names !== null) report.partitionsDropped.push(...names);
    }
    // what is left goes row by row: instances in weeks still holding live or held ones, and the default partition's
    const batch = this.#opts.batch ?? 1000;
    const dropping = new Set(dryRun ? weeks.filter((w) => droppable(w, now)).map((w) => w.week) : []);
    for (let after: string | null = null; ; ) {
      const next = (await tx(c, 'flow_engine', () => expiringIn(c, days, null, null, dryRun ? Number.MAX_SAFE_INTEGER : batch))).filter(
        (i) => !dropping.has(i.week),
      );
      if (dryRun) {
        report.instancesRemoved += next.length;
        break;
      }
      if (next.length === 0 || next[0]!.id === after) break;
      after = next[0]!.id;
      if (this.#opts.archiveDir) for (const f of await archiveInstances(c, this.#opts.archiveDir, next)) files.add(f);
      report.instancesRemoved += await tx(c, 'flow_engine', () =>
        removeInstances(
          c,
          days,
          next.map((i) => i.id),
        ),
      );
    }
    report.archiveFiles = [...files];
    if (!dryRun) {
      report.bytesAfter = await historyBytes(c);
      report.bytesFreed = report.bytesBefore - report.bytesAfter;
    }
    this.#log.info({ ...report }, dryRun ? 'retention dry run' : 'retention run');
    return report;
  }

  /**
   * Drops a week's partitions, which locks the parents exclusively: in the live commit's order
   * (step_runs, then journal), and waiting at most DROP_LOCK_WAIT each try, so a live commit
   * queued behind the DROP waits no longer than that, and a commit batch that holds journal and
   * wants step_runs meets a timeout here before Postgres would call it a deadlock (deadlock_timeout
   * is a second). Null when every try found the tables busy: the week, empty now, goes next run.
   */
  async #dropWeek(c: Client, week: string): Promise<string[] | null> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await tx(c, null, async () => {
          await c.query(`SET LOCAL lock_timeout = '${DROP_LOCK_WAIT_MS}ms'`);
          await c.query('LOCK TABLE step_runs, journal IN ACCESS EXCLUSIVE MODE');
          return dropWeek(c, week);
        });
      } catch (err) {
        if ((err as { code?: string }).code !== LOCK_NOT_AVAILABLE) throw err;
        if (attempt >= DROP_TRIES) {
          this.#log.info({ week }, 'retention: the history tables stayed busy; the week is dropped next run');
          return null;
        }
        await new Promise((r) => setTimeout(r, 20 * attempt));
      }
    }
  }

  /**
   * Runs every `intervalMs` (first after one interval) until `stop()`; a run that fails is logged
   * and retried next time. The week partitions ahead are made at once: a node that starts after a
   * long pause must not leave this week's commits to the default partition until its first run.
   */
  schedule(): void {
    if (this.#timer !== null) return;
    const every = this.#opts.intervalMs ?? 60 * 60_000;
    this.#running = this.#db.pool
      .connect()
      .then(async (c) => {
        try {
          await ensurePartitions(c);
        } finally {
          c.release();
        }
      })
      .catch((err: unknown) => this.#log.error({ err }, 'retention: making the week partitions ahead failed'));
    const tick = () => {
      this.#running = this.run()
        .catch((err: unknown) => this.#log.error({ err }, 'retention run failed'))
        .finally(() => {
          this.#running = null;
          if (this.#timer !== null) this.#timer = setTimeout(tick, every).unref();
        });
    };
    this.#timer = setTimeout(tick, every).unref();
  }

  async stop(): Promise<void> {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    await this.#running;
  }
}

/** A week gained an instance that is not removable while retention was removing it (a verb brought one back). */
class WeekRevived extends Error {}

// SQLSTATE lock_not_available: lock_timeout expired
const LOCK_NOT_AVAILABLE = '55P03';
const DROP_LOCK_WAIT_MS = 100;
const DROP_TRIES = 50;

/** One transaction on `c`, as `role` (null: the connecting role, which owns the partitions). */
async function tx<T>(c: Client, role: 'flow_engine' | null, fn: () => Promise<T>): Promise<T> {
  await c.query(role === null ? 'BEGIN' : `BEGIN; SELECT set_config('role', '${role}', true)`);
  try {
    const out = await fn();
    await c.query('COMMIT');
    return out;
  } catch (err) {
    await c.query('ROLLBACK');
    throw err;
  }
}
