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
 * The burst is judged against its own baseline, measured in the same run by the same engine
 * settings: the same number of plain steps (the same stub step, in workflows of 10 steps, as
 * `npm run bench` runs them), started beforehand and timed from `workers.start()` to the last
 * one's commit. Burst and plain steps alternate for BENCH_ROUNDS rounds (default 3); the table
 * gives each round, the medians and the ratio (goal: ≤ 2), with what each fired
 * instance cost: transitions committed, transactions the engine process sent (by kind, counted
 * in node-postgres's Client.query) and write transactions (the server's xid counter).
 * Prints tables; asserts nothing. Goal for the spread: fired p99 ≤ 50 ms; the spread's cost per
 * fired instance is printed too (what a timer costs when the pool keeps up).
 *
 *   npm run bench:timers     (BENCH_TIMERS=… BENCH_SPREAD_MS=… BENCH_ROUNDS=… BENCH_PLAIN_CHAIN=… change the sizes;
 *   BENCH_ONLY=spread|burst|short runs one shape, burst with its baseline;
 *   BENCH_DEBUG=1 lists each firing statement: when it started and how long it took to commit)
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { type LogicVersion, type StepDef, TERMINAL_STATES } from '../contracts/index.ts';
import { Engine } from '../engine/runtime/engine.ts';
import type { TransitionObserver } from '../engine/runtime/observer.ts';
import { type Db, openDb } from '../engine/store/db.ts';
import { dropSchema, migrate } from '../engine/store/migrate.ts';
import { makeLogic } from '../test/contracts/helpers.ts';
import { TEST_MODULE_BYTES, TEST_MODULES } from '../test/support/ledger-executor.ts';
import { SentTransactions } from './sent-transactions.ts';
import { fmt, markdownTable, median, pool, reportGoal, verdict } from './support.ts';

const url = process.env['DATABASE_URL'];
if (!url) throw new Error('set DATABASE_URL (or run through scripts/with-postgres.sh)');
const TIMERS = Number(process.env['BENCH_TIMERS'] ?? 10_000);
const SPREAD_MS = Number(process.env['BENCH_SPREAD_MS'] ?? 60_000);
/** Time between arming the timers and the first one falling due, so the pool is in its idle rhythm. */
const LEAD_MS = 1500;
const SHORT_DELAYS = 50;
const SHORT_OVER_MS = 15_000;
const ROUNDS = Number(process.env['BENCH_ROUNDS'] ?? 3);
/** The baseline's workflows are chains of this many steps, as `npm run bench` runs them (BENCH_PLAIN_CHAIN=1: one step each, the burst's shape without its timer). */
const PLAIN_CHAIN = Number(process.env['BENCH_PLAIN_CHAIN'] ?? 10);
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

/** The step after a delay, and every plain step: a stub that answers at once (only the engine costs). */
const STUB = { func: async () => ({ status: 'succeeded' as const, output: { ok: true } }) };

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

/** The baseline: plain steps, the same stub step as after the delay, PLAIN_CHAIN to a workflow. */
const plain: LogicVersion = makeLogic({
  logicId: 'bench.plain',
  domain: 'bench',
  modules: OPS,
  start: 's0',
  steps: Object.fromEntries(
    Array.from({ length: PLAIN_CHAIN }, (_, i): [string, StepDef] => [
      `s${i}`,
      { kind: 'func', module: 'ops', export: 'after', ...(i + 1 < PLAIN_CHAIN ? { next: `s${i + 1}` } : {}) },
    ]),
  ),
});

const sent = new SentTransactions();
sent.install();

/** What a measured piece of work cost, counted while it ran. */
interface Cost {
  /** Transitions the workers committed. */
  transitions: number;
  /** Transactions the engine process sent, by kind. */
  sent: Map<string, number>;
  /** Transactions that wrote (the server's xid counter moved). */
  writeTx: number;
  /** CPU time of this process (the engine, user + system), ms. */
  cpuMs: number;
  /** WAL the server wrote, bytes, and its fsyncs (pg_stat_wal: the bench's server serves only it). */
  walBytes: number;
  walSyncs: number;
  /** Full-page images in that WAL (a page's first change after a checkpoint). */
  walFpi: number;
}

/** Counts the instances that end and the transitions committed; `ended` resolves when `n` have ended. */
function counting(n: number): { observer: TransitionObserver; ended: Promise<void>; transitions: () => number } {
  let transitions = 0;
  let ended = 0;
  let done: () => void = () => {};
  const all = new Promise<void>((r) => (done = r));
  return {
    observer: {
      onTransition: (_from, t, committed) => {
        if (!committed) return;
        transitions++;
        if (TERMINAL_STATES.has(t.instance.state) && ++ended === n) done();
      },
    },
    ended: all,
    transitions: () => transitions,
  };
}

/** The next xid (read without taking one) and the WAL written and flushed so far. */
async function serverReading(c: pg.Client): Promise<{ xid: number; walBytes: number; walSyncs: number; walFpi: number }> {
  const r = await c.query<{ x: string; b: string; s: string; f: string }>(
    'SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS x, wal_bytes AS b, wal_sync AS s, wal_fpi AS f FROM pg_stat_wal',
  );
  return { xid: Number(r.rows[0]!.x), walBytes: Number(r.rows[0]!.b), walSyncs: Number(r.rows[0]!.s), walFpi: Number(r.rows[0]!.f) };
}

/** Runs `work` with the engine process's transactions and the server's write transactions counted. */
async function measured(work: () => Promise<void>, count: { transitions: () => number }): Promise<Cost> {
  const meta = new pg.Client({ connectionString: url });
  await meta.connect();
  try {
    sent.reset();
    const t0 = count.transitions();
    await meta.query('SELECT pg_stat_force_next_flush()');
    const r0 = await serverReading(meta);
    const cpu0 = process.cpuUsage();
    sent.counting = true;
    await work();
    sent.counting = false;
    const cpu = process.cpuUsage(cpu0);
    // WAL statistics are reported lazily by each backend: wait for the engine's to go idle and report
    await new Promise((r) => setTimeout(r, 1200));
    await meta.query('SELECT pg_stat_force_next_flush()');
    const r1 = await serverReading(meta);
    return {
      transitions: count.transitions() - t0,
      sent: new Map(sent.tx),
      writeTx: r1.xid - r0.xid,
      cpuMs: (cpu.user + cpu.system) / 1000,
      walBytes: r1.walBytes - r0.walBytes,
      walSyncs: r1.walSyncs - r0.walSyncs,
      walFpi: r1.walFpi - r0.walFpi,
    };
  } finally {
    sent.counting = false;
    await meta.end();
  }
}

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
  cost: Cost | null;
}

/** Pre-armed timers (spread or burst), or short delays set while running (`spreadMs` null). */
async function run(label: string, spreadMs: number | null): Promise<Result> {
  const n = spreadMs === null ? SHORT_DELAYS : TIMERS;
  const count = counting(n);
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
  const engine = new Engine({ db, executors: STUB, observer: count.observer });
  try {
    await engine.publishVersion(engine.env, logic, TEST_MODULE_BYTES);
    await engine.publishVersion(engine.env, shortDelay, TEST_MODULE_BYTES);
    if (spreadMs === null) return await shortDelays(label, db, engine, count.ended);
    await pool(TIMERS, 32, async () => {
      await engine.start({ logicId: logic.logicId, input: {} });
    });
    // steady state: fresh tables that just grew from empty carry plans made for empty tables
    // (cached in the pool's sessions) until autovacuum analyzes them — not what a running system sees.
    // workflow_outputs is still empty here; its lookups are planned per call (migration 0017)
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
    const cost = await measured(() => count.ended, count);
    return await results(label, db, engine, (performance.now() - t0) / 1000, cost);
  } finally {
    await engine.close();
    await dropSchema(db);
    await db.close();
  }
}

async function shortDelays(label: string, db: Db, engine: Engine, ended: Promise<void>): Promise<Result> {
  await engine.workers.start();
  const t0 = performance.now();
  for (let i = 0; i < SHORT_DELAYS; i++) {
    await engine.start({ logicId: shortDelay.logicId, input: {} });
    await new Promise((r) => setTimeout(r, SHORT_OVER_MS / SHORT_DELAYS));
  }
  await ended;
  return results(label, db, engine, (performance.now() - t0) / 1000, null);
}

/**
 * The burst's baseline: TIMERS plain steps (TIMERS / PLAIN_CHAIN workflows), started beforehand
 * with the workers stopped, timed from `workers.start()` to the commit of the last; seconds.
 */
async function plainSteps(): Promise<{ seconds: number; cost: Cost }> {
  const workflows = Math.ceil(TIMERS / PLAIN_CHAIN);
  const count = counting(workflows);
  const db: Db = await openDb(url, { schema: `bench_plain_${Date.now()}`, poolSize: 20 });
  await migrate(db);
  const engine = new Engine({ db, executors: STUB, observer: count.observer });
  try {
    await engine.publishVersion(engine.env, plain, TEST_MODULE_BYTES);
    await pool(workflows, 32, async () => {
      await engine.start({ logicId: plain.logicId, input: {} });
    });
    await db.pool.query('ANALYZE');
    let seconds = 0;
    const cost = await measured(async () => {
      const t0 = performance.now();
      await engine.workers.start();
      await count.ended;
      seconds = (performance.now() - t0) / 1000;
    }, count);
    return { seconds, cost };
  } finally {
    await engine.close();
    await dropSchema(db);
    await db.close();
  }
}

/** Lateness read from the probes and the commit timestamps. */
async function results(label: string, db: Db, engine: Engine, seconds: number, cost: Cost | null): Promise<Result> {
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
    cost,
  };
}

out(`timer bench: ${fmt(TIMERS)} delay timers, one worker pool (default concurrency and poll interval), Postgres ${url.replace(/\/\/.*@/, '//…@')}`);
const only = process.env['BENCH_ONLY'];
const all: Result[] = [];
const bursts: Result[] = [];
const plains: { seconds: number; cost: Cost }[] = [];
if (only === undefined || only === 'spread') all.push(await run(`(i) spread over ${SPREAD_MS / 1000} s`, SPREAD_MS));
if (only === undefined || only === 'burst') {
  // alternating, so a change in the box's load falls on both
  for (let round = 0; round < ROUNDS; round++) {
    if (round % 2 === 0) plains.push(await plainSteps());
    bursts.push(await run(`(ii) burst, round ${round + 1}`, 0));
    if (round % 2 === 1) plains.push(await plainSteps());
    out(`round ${round + 1}: burst ${fmt(bursts[round]!.after.max / 1000, 2)} s, plain steps ${fmt(plains[round]!.seconds, 2)} s`);
  }
  all.push(...bursts);
}
if (only === undefined || only === 'short') all.push(await run(`(iii) ${SHORT_DELAYS} short delays`, null));
const cell = (l: Lateness) => `${fmt(l.p50).padStart(6)} ${fmt(l.p99).padStart(6)} ${fmt(l.max).padStart(6)}`;
out('');
out(`lateness in ms after fire_at (p50 p99 max); poll interval ${all[0]!.pollMs} ms; goal for the spread: fired p99 ≤ 50 ms`);
out(`${'load'.padEnd(30)} ${'timer fired'.padEnd(20)} ${'wake-up applied'.padEnd(20)} ${'next step done'.padEnd(20)} batches (max)  wall`);
for (const r of all) {
  out(
    `${r.label.padEnd(30)} ${cell(r.fired).padEnd(20)} ${cell(r.applied).padEnd(20)} ${cell(r.after).padEnd(20)} ` +
      `${String(r.batches).padStart(7)} (${r.maxBatch})  ${fmt(r.seconds, 1)} s`,
  );
}
const spreadRun = all.find((r) => r.label.startsWith('(i)'));
if (spreadRun) {
  reportGoal({
    case: `timers: ${fmt(TIMERS)} spread over ${SPREAD_MS / 1000} s, lateness after fire_at`,
    clients: '16',
    result: `fired p50 ${fmt(spreadRun.fired.p50)} / p99 ${fmt(spreadRun.fired.p99)} ms`,
    vs: `next step done p99 ${fmt(spreadRun.after.p99)} ms`,
    goal: verdict('fired p99 ≤ 50 ms', spreadRun.fired.p99 <= 50, `${fmt(spreadRun.fired.p99)} ms`),
  });
}

if (bursts.length > 0) {
  const burstS = bursts.map((b) => b.after.max / 1000);
  const plainS = plains.map((p) => p.seconds);
  const ratios = burstS.map((b, i) => b / plainS[i]!);
  out('');
  out(`burst against the same number of plain steps (${fmt(TIMERS)} stub steps in workflows of ${PLAIN_CHAIN}), same engine settings, same run; goal: ratio ≤ 2`);
  out(
    markdownTable(
      ['round', 'burst: fire_at → last next step done (s)', 'plain steps: start → last done (s)', 'ratio'],
      [
        ...burstS.map((b, i) => [String(i + 1), fmt(b, 2), fmt(plainS[i]!, 2), fmt(ratios[i]!, 2)]),
        ['median', fmt(median(burstS), 2), fmt(median(plainS), 2), `**${fmt(median(ratios), 2)}**: ${median(ratios) <= 2 ? 'met' : 'missed'}`],
      ],
    ),
  );
  reportGoal({
    case: `timers: ${fmt(TIMERS)} due at once, fire_at → each next step done`,
    clients: '16',
    result: `${fmt(median(burstS), 2)} s against ${fmt(median(plainS), 2)} s for as many plain steps`,
    vs: `${ratios.map((x) => fmt(x, 2)).join(', ')} by round`,
    goal: verdict('≤ 2× the plain steps', median(ratios) <= 2, `${fmt(median(ratios), 2)}×`),
  });
  // what one fired instance (one plain step) cost, medians over the rounds
  const per = (costs: Cost[], n: number, f: (c: Cost) => number) => median(costs.map((c) => f(c) / n));
  const burstCosts = bursts.map((b) => b.cost!);
  const plainCosts = plains.map((p) => p.cost);
  const kinds = [...new Set([...burstCosts, ...plainCosts].flatMap((c) => [...c.sent.keys()]))];
  const rows = [
    ['transitions committed', ...[per(burstCosts, TIMERS, (c) => c.transitions), per(plainCosts, TIMERS, (c) => c.transitions)].map((v) => fmt(v, 3))],
    ['engine process CPU, ms', ...[per(burstCosts, TIMERS, (c) => c.cpuMs), per(plainCosts, TIMERS, (c) => c.cpuMs)].map((v) => fmt(v, 3))],
    ['WAL written, bytes', ...[per(burstCosts, TIMERS, (c) => c.walBytes), per(plainCosts, TIMERS, (c) => c.walBytes)].map((v) => fmt(v, 0))],
    ['WAL full-page images', ...[per(burstCosts, TIMERS, (c) => c.walFpi), per(plainCosts, TIMERS, (c) => c.walFpi)].map((v) => fmt(v, 3))],
    ['WAL fsyncs', ...[per(burstCosts, TIMERS, (c) => c.walSyncs), per(plainCosts, TIMERS, (c) => c.walSyncs)].map((v) => fmt(v, 3))],
    ['write transactions (server xid delta)', ...[per(burstCosts, TIMERS, (c) => c.writeTx), per(plainCosts, TIMERS, (c) => c.writeTx)].map((v) => fmt(v, 3))],
    ['transactions the engine process sent, all', ...[per(burstCosts, TIMERS, total), per(plainCosts, TIMERS, total)].map((v) => fmt(v, 3))],
    ...kinds
      .map((k) => [`&nbsp;&nbsp;${k}`, ...[per(burstCosts, TIMERS, (c) => c.sent.get(k) ?? 0), per(plainCosts, TIMERS, (c) => c.sent.get(k) ?? 0)].map((v) => fmt(v, 3))])
      .sort((a, b) => Number(b[1]!.replace(/,/g, '')) - Number(a[1]!.replace(/,/g, ''))),
  ];
  out('');
  out(markdownTable(['per fired instance (burst) / per plain step, medians', 'burst', 'plain'], rows));
}

// the spread's cost per fired instance: what a timer costs when the pool keeps up (no burst)
const spread = all.find((r) => r.label.startsWith('(i)'))?.cost;
if (spread) {
  const per = (v: number) => fmt(v / TIMERS, 3);
  out('');
  out(
    markdownTable(
      ['per fired instance, spread', ''],
      [
        ['transitions committed', per(spread.transitions)],
        ['WAL written, bytes', fmt(spread.walBytes / TIMERS, 0)],
        ['WAL fsyncs', per(spread.walSyncs)],
        ['write transactions (server xid delta)', per(spread.writeTx)],
        ['transactions the engine process sent, all', per(total(spread))],
        ...[...spread.sent].sort((a, b) => b[1] - a[1]).map(([k, n]) => [`&nbsp;&nbsp;${k}`, per(n)]),
      ],
    ),
  );
}

function total(c: Cost): number {
  return [...c.sent.values()].reduce((a, b) => a + b, 0);
}
