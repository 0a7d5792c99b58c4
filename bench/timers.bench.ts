/**
 * Timer lateness (issue "Waiting, time and composition"): how long after its `fire_at` a due timer
 * has fired, its wake-up transition been applied, and the step after the delay run — each the
 * commit time of the row that says so (track_commit_timestamp, which scripts/with-postgres.sh
 * turns on; the fired-timer probe's own insert rides in each firing statement, so the figures
 * include its cost). One worker pool at its default poll interval; two shapes of load:
 *   (i)   10,000 timers spread evenly over 60 s;
 *   (ii)  a burst of 10,000 due at the same instant;
 *   (iii) short delays set while the pool runs: 50 instances started 300 ms apart, each running
 *         a step, then waiting 50 ms (a timer due sooner than the next poll), then a step.
 * Prints a table; asserts nothing. Target: p99 ≤ poll interval + 100 ms.
 *
 *   bash scripts/with-postgres.sh npx tsx bench/timers.bench.ts
 *   (BENCH_TIMERS=… BENCH_SPREAD_MS=… change the sizes; BENCH_ONLY=spread|burst runs one shape;
 *   BENCH_DEBUG=1 lists each firing statement: when it started and how long it took to commit)
 */
import { performance } from 'node:perf_hooks';
import type { LogicVersion } from '../contracts/index.ts';
import { Engine } from '../engine/runtime/engine.ts';
import { type Db, openDb } from '../engine/store/db.ts';
import { dropSchema, migrate } from '../engine/store/migrate.ts';
import { makeLogic } from '../test/contracts/helpers.ts';
import { TEST_MODULE_BYTES, TEST_MODULES } from '../test/support/ledger-executor.ts';
import { fmt, pool } from './support.ts';

const url = process.env['DATABASE_URL'];
if (!url) throw new Error('set DATABASE_URL (or run through scripts/with-postgres.sh)');
const TIMERS = Number(process.env['BENCH_TIMERS'] ?? 10_000);
const SPREAD_MS = Number(process.env['BENCH_SPREAD_MS'] ?? 60_000);
/** Time between arming the timers and the first one falling due, so the pool is in its idle rhythm. */
const LEAD_MS = 1500;
const SHORT_DELAYS = 50;
const SHORT_OVER_MS = 15_000;
const out = (s: string) => process.stdout.write(`${s}\n`);

/** The steps around the delay are func steps, run by a stub executor: only the timers cost. */
const OPS = TEST_MODULES;

const logic: LogicVersion = makeLogic({
  logicId: 'bench.timers',
  domain: 'bench',
  modules: OPS,
  start: 'wait',
  steps: {
    wait: { kind: 'delay', duration: 'PT1H', next: 'after' },
    after: { kind: 'func', module: 'ops', export: 'after' },
  },
});

const shortDelay: LogicVersion = makeLogic({
  logicId: 'bench.short-delay',
  domain: 'bench',
  modules: OPS,
  start: 'before',
  steps: {
    before: { kind: 'func', module: 'ops', export: 'before', next: 'wait' },
    wait: { kind: 'delay', duration: 'PT0.05S', next: 'after' },
    after: { kind: 'func', module: 'ops', export: 'after' },
  },
});

interface Lateness {
  p50: number;
  p99: number;
  max: number;
}
interface Result {
  label: string;
  pollMs: number;
  /** Fired: the commit that marked the timer fired and woke its instance − fire_at. */
  fired: Lateness;
  /** The wake-up transition (waiting → on) committed − fire_at. */
  applied: Lateness;
  /** The step after the delay executed and its outcome committed − fire_at. */
  after: Lateness;
  batches: number;
  maxBatch: number;
  seconds: number;
}

/** Pre-armed timers (spread or burst), or short delays set while running (`spreadMs` null). */
async function run(label: string, spreadMs: number | null): Promise<Result> {
  const db: Db = await openDb(url, { schema: `bench_timers_${Date.now()}`, poolSize: 20 });
  await migrate(db);
  const tracked = await db.pool.query<{ track_commit_timestamp: string }>('SHOW track_commit_timestamp');
  if (tracked.rows[0]!.track_commit_timestamp !== 'on') throw new Error('this bench reads commit times: start Postgres with track_commit_timestamp=on');
  // bench-only probes, whose rows' xmin dates the commits: each fired timer (a timer row goes
  // when it fires; one set-based insert per firing statement) and each wake-up transition
  await db.pool.query(`
    CREATE TABLE bench_fired (workflow_id uuid PRIMARY KEY, fire_at timestamptz NOT NULL, statement_at timestamptz NOT NULL);
    GRANT INSERT ON bench_fired TO flow_app, flow_engine;
    CREATE FUNCTION bench_fired_log() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO bench_fired SELECT workflow_id, fire_at, statement_timestamp() FROM gone; RETURN NULL; END $$;
    CREATE TRIGGER bench_fired AFTER DELETE ON timers REFERENCING OLD TABLE AS gone
      FOR EACH STATEMENT EXECUTE FUNCTION bench_fired_log();
    CREATE TABLE bench_wake (workflow_id uuid PRIMARY KEY);
    GRANT INSERT ON bench_wake TO flow_app, flow_engine;
    CREATE FUNCTION bench_wake_log() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO bench_wake VALUES (NEW.id); RETURN NEW; END $$;
    CREATE TRIGGER bench_wake AFTER UPDATE ON workflows FOR EACH ROW
      WHEN (OLD.state = 'waiting' AND NEW.state <> 'waiting') EXECUTE FUNCTION bench_wake_log();`);
  const engine = new Engine({
    db,
    executors: { func: async () => ({ status: 'succeeded', output: { ok: true } }) },
  });
  try {
    await engine.publishVersion(engine.env, logic, TEST_MODULE_BYTES);
    await engine.publishVersion(engine.env, shortDelay, TEST_MODULE_BYTES);
    if (spreadMs === null) return await shortDelays(label, db, engine);
    await pool(TIMERS, 32, async () => {
      await engine.start({ logicId: logic.logicId, input: {} });
    });
    // steady state: fresh tables that just grew from empty carry plans made for empty tables
    // (cached in the pool's sessions) until autovacuum analyzes them — not what a running system sees
    await db.pool.query('ANALYZE');
    await engine.workers.start();
    await new Promise((r) => setTimeout(r, 1000));
    const t0 = performance.now();
    // re-arm every parked delay (timer rows, database clock): evenly over `spreadMs`, or all at once
    await db.pool.query(
      `UPDATE timers t SET fire_at = now() + $1::float8 * interval '1 millisecond' + o.rank * $2::float8 * interval '1 millisecond'
       FROM (SELECT id, row_number() OVER (ORDER BY id) - 1 AS rank FROM timers) o WHERE t.id = o.id`,
      [LEAD_MS, spreadMs / TIMERS],
    );
    await allCompleted(db, TIMERS);
    return await results(label, db, engine, (performance.now() - t0) / 1000);
  } finally {
    await engine.close();
    await dropSchema(db);
    await db.close();
  }
}

async function shortDelays(label: string, db: Db, engine: Engine): Promise<Result> {
  await engine.workers.start();
  const t0 = performance.now();
  for (let i = 0; i < SHORT_DELAYS; i++) {
    await engine.start({ logicId: shortDelay.logicId, input: {} });
    await new Promise((r) => setTimeout(r, SHORT_OVER_MS / SHORT_DELAYS));
  }
  await allCompleted(db, SHORT_DELAYS);
  return results(label, db, engine, (performance.now() - t0) / 1000);
}

async function allCompleted(db: Db, n: number): Promise<void> {
  for (;;) {
    const r = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM workflows WHERE state = 'completed'`);
    if (r.rows[0]!.n === n) return;
    await new Promise((res) => setTimeout(res, 100));
  }
}

/** Lateness read from the probes and the commit timestamps. */
async function results(label: string, db: Db, engine: Engine, seconds: number): Promise<Result> {
  const stats = await db.pool.query<Record<string, number>>(`
    WITH l AS (
      SELECT extract(epoch FROM pg_xact_commit_timestamp(t.xmin) - t.fire_at) * 1000 AS fired,
             extract(epoch FROM pg_xact_commit_timestamp(w.xmin) - t.fire_at) * 1000 AS applied,
             extract(epoch FROM pg_xact_commit_timestamp(s.xmin) - t.fire_at) * 1000 AS after
      FROM bench_fired t
      JOIN bench_wake w ON w.workflow_id = t.workflow_id
      JOIN step_runs s ON s.workflow_id = t.workflow_id AND s.step = 'after')
    SELECT ${['fired', 'applied', 'after']
      .map(
        (c) =>
          `percentile_cont(0.5) WITHIN GROUP (ORDER BY ${c}) AS ${c}_p50, percentile_cont(0.99) WITHIN GROUP (ORDER BY ${c}) AS ${c}_p99, max(${c}) AS ${c}_max`,
      )
      .join(', ')}
    FROM l`);
  const batches = await db.pool.query<{ batches: number; max_batch: number }>(
    `SELECT count(*)::int AS batches, max(n)::int AS max_batch FROM (SELECT xmin, count(*) AS n FROM bench_fired GROUP BY xmin) b`,
  );
  if (process.env['BENCH_DEBUG']) {
    const b = await db.pool.query(`SELECT extract(epoch FROM statement_at - min(fire_at)) * 1000 AS started, extract(epoch FROM pg_xact_commit_timestamp(xmin) - statement_at) * 1000 AS took, count(*)::int AS n FROM bench_fired GROUP BY statement_at, xmin ORDER BY 1`);
    for (const r of b.rows) out(`batch started ${r.started} ms after due, committed ${r.took} ms later, ${r.n} timers`);
  }
  const s = stats.rows[0]!;
  const pick = (c: string): Lateness => ({ p50: Number(s[`${c}_p50`]), p99: Number(s[`${c}_p99`]), max: Number(s[`${c}_max`]) });
  return {
    label,
    pollMs: engine.workers.pollMs,
    fired: pick('fired'),
    applied: pick('applied'),
    after: pick('after'),
    batches: batches.rows[0]!.batches,
    maxBatch: batches.rows[0]!.max_batch,
    seconds,
  };
}

out(`timer bench: ${fmt(TIMERS)} delay timers, one worker pool (default concurrency and poll interval), Postgres ${url.replace(/\/\/.*@/, '//…@')}`);
const only = process.env['BENCH_ONLY'];
const all: Result[] = [];
if (only === undefined || only === 'spread') all.push(await run(`(i) spread over ${SPREAD_MS / 1000} s`, SPREAD_MS));
if (only !== 'spread' && only !== 'short') all.push(await run('(ii) burst, all due at once', 0));
if (only === undefined || only === 'short') all.push(await run(`(iii) ${SHORT_DELAYS} short delays`, null));
const cell = (l: Lateness) => `${fmt(l.p50).padStart(6)} ${fmt(l.p99).padStart(6)} ${fmt(l.max).padStart(6)}`;
out('');
out(`lateness in ms after fire_at (p50 p99 max); poll interval ${all[0]!.pollMs} ms, target p99 ≤ ${all[0]!.pollMs + 100} ms`);
out(`${'load'.padEnd(30)} ${'timer fired'.padEnd(20)} ${'wake-up applied'.padEnd(20)} ${'next step done'.padEnd(20)} batches (max)  wall`);
for (const r of all) {
  out(
    `${r.label.padEnd(30)} ${cell(r.fired).padEnd(20)} ${cell(r.applied).padEnd(20)} ${cell(r.after).padEnd(20)} ` +
      `${String(r.batches).padStart(7)} (${r.maxBatch})  ${fmt(r.seconds, 1)} s`,
  );
}
