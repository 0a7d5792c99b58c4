/**
 * The one table of every performance goal (`npm run bench [-- --quick]`, docs/performance.md says how each figure is
 * measured). This process measures the raw floor, the engine's proxy and pass steps, one
 * workflow alone, a func step's module run and API starts, each against its baseline in the same
 * round; then bench/other-goals.ts runs the benches of the other goals (engine CPU, compile,
 * growth, timers) on the same server, one after another, and their rows join the table.
 * `--quick` (one round, smaller batches) leaves out growth and timers, which take minutes.
 */
import { freemem, totalmem, cpus } from 'node:os';
import { relative } from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import type { LogicVersion, StepDef } from '../contracts/index.ts';
import { Engine } from '../engine/runtime/engine.ts';
import type { TransitionObserver } from '../engine/runtime/observer.ts';
import { createFuncRuntime } from '../host-functions/index.ts';
import { buildTestModules, TEST_MEMORY_PAGES } from '../test/host-functions/helpers/test-modules.ts';
import { type Db, openDb } from '../engine/store/db.ts';
import { dropSchema, migrate } from '../engine/store/migrate.ts';
import { makeLogic } from '../test/contracts/helpers.ts';
import { apiLayerCost, apiStartThroughput } from './api-start.ts';
import { floor, httpAlone } from './floor.ts';
import { stepCommitLatencies } from './step-commit.ts';
import { traced } from './tracing.ts';
import { runOtherGoals } from './other-goals.ts';
import { type Counts, fmt, type GoalRow, markdownTable, median, minimalService, PgCounter, percentile, pool, verdict } from './support.ts';
import { Watch } from './watch.ts';

const url = process.env['DATABASE_URL'];
if (!url) throw new Error('set DATABASE_URL (npm run bench starts a Postgres for you)');
const QUICK = process.argv.includes('--quick');
const WORKFLOWS = Number(process.env['BENCH_WORKFLOWS'] ?? (QUICK ? 200 : 600));
const ROUNDS = Number(process.env['BENCH_ROUNDS'] ?? (QUICK ? 1 : 3));
const STEPS = 10;
/** Raw transactions per floor case: half the engine's steps, enough for a steady rate. */
const FLOOR_OPS = (WORKFLOWS * STEPS) / 2;
const CONCURRENCIES = [16, 64] as const;
/** Solo workflows run one after another for the per-step latency alone. */
const SOLO_RUNS = QUICK ? 15 : 30;
/** Workflows run through each measured engine's connections before it is measured (warmUp). */
const WARMUP = QUICK ? 50 : 100;
const out = (s: string) => process.stdout.write(`${s}\n`);

function chain(kind: 'pass' | 'proxy'): LogicVersion {
  const steps: Record<string, StepDef> = {};
  for (let i = 0; i < STEPS; i++) {
    const next = i + 1 < STEPS ? { next: `s${i + 1}` } : {};
    steps[`s${i}`] = kind === 'pass' ? { kind: 'pass', ...next } : { kind: 'proxy', path: '/step', ...next };
  }
  return makeLogic({ logicId: `bench.${kind}`, domain: 'bench', start: 's0', steps });
}

async function freshEngine(serviceUrl: string, concurrency: number, observer?: TransitionObserver, schema = `bench_${Date.now()}`): Promise<{ db: Db; engine: Engine }> {
  const db = await openDb(url, { schema, poolSize: concurrency + 4 });
  await migrate(db);
  return { db, engine: engineOn(db, serviceUrl, concurrency, observer) };
}

/**
 * An engine as `s8flow start` runs it: it polls at its own interval (250 ms). Work reaches it by
 * wake-ups; a shorter poll only adds idle statements that land between a lone workflow's steps.
 */
function engineOn(db: Db, serviceUrl: string, concurrency: number, observer?: TransitionObserver): Engine {
  return new Engine({
    db,
    executors: { handlers: new Map([['BENCH', { url: serviceUrl }]]) },
    worker: { concurrency },
    ...(observer ? { observer } : {}),
  });
}

/**
 * Runs WARMUP workflows of `logic` through an engine on `db`, so the measured engine that comes
 * next finds its connections as a long-running engine has them. A new backend compiles the
 * engine's PL/pgSQL functions and plans each of their statements five times (custom plans) before
 * it settles on a generic plan; a case of a few seconds on brand-new connections counted that
 * start-up as if every step paid it (same run, same box: 1,103 steps/s cold against 1,514-1,554
 * warm at concurrency 16).
 */
async function warmUp(db: Db, serviceUrl: string, concurrency: number, logic: LogicVersion, kind: 'pass' | 'proxy'): Promise<void> {
  const watch = new Watch();
  const engine = engineOn(db, serviceUrl, concurrency, watch);
  await engine.workers.start();
  const ended = kind === 'proxy' ? watch.until(WARMUP) : Promise.resolve();
  await pool(WARMUP, 16, async () => {
    await engine.start({ logicId: logic.logicId, input: {} });
  });
  await ended;
  await engine.close();
}

/**
 * Steps per second, and what each step cost Postgres. Proxy steps: `WORKFLOWS` instances are
 * started before the workers, by an engine of their own that is closed before counting (starting
 * has its own row), and measured from the moment the workers start until the last instance
 * ends. Pass steps run inside the start's own commit, so there the starts are the measured work.
 */
async function throughput(counter: PgCounter, kind: 'pass' | 'proxy', serviceUrl: string, concurrency: number) {
  const schema = `bench_${Date.now()}`;
  const logic = chain(kind);
  const startAll = (engine: Engine) =>
    pool(WORKFLOWS, 16, async () => {
      await engine.start({ logicId: logic.logicId, input: {} });
    });
  const db = await openDb(url, { schema, poolSize: concurrency + 4 });
  await migrate(db);
  await engineOn(db, serviceUrl, concurrency).publish(logic);
  await warmUp(db, serviceUrl, concurrency, logic, kind);
  if (kind === 'proxy') {
    // started by an engine on a pool of its own, before the measured workers run
    const setup = await openDb(url, { schema, poolSize: 20 });
    await startAll(engineOn(setup, serviceUrl, 16));
    await setup.close();
  }

  const watch = new Watch();
  const engine = engineOn(db, serviceUrl, concurrency, watch);
  let seconds = 0;
  let ownQueries = 0;
  const counted = await counter.measure(async (ended) => {
    const t0 = performance.now();
    await engine.workers.start();
    if (kind === 'proxy') await watch.until(WORKFLOWS);
    else {
      // ended in their starts, which no hook reports: one read-only query (subtracted) checks
      await startAll(engine);
      ownQueries++;
      const r = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM workflows WHERE state = 'completed'`);
      if (r.rows[0]!.n !== WORKFLOWS + WARMUP) throw new Error(`pass workflows did not end in their starts: ${r.rows[0]!.n - WARMUP} of ${WORKFLOWS}`);
    }
    seconds = (performance.now() - t0) / 1000;
    await ended();
    await engine.close();
    await db.close();
  });
  const cleanup = new pg.Client({ connectionString: url });
  await cleanup.connect();
  await cleanup.query(`DROP SCHEMA ${schema} CASCADE`);
  await cleanup.end();
  const steps = WORKFLOWS * STEPS;
  return { rate: steps / seconds, ...perStep({ ...counted, commits: counted.commits - ownQueries }, steps) };
}

function perStep(c: Counts, steps: number): Counts {
  return { writeTx: c.writeTx / steps, commits: c.commits / steps, walSyncs: c.walSyncs / steps };
}

/**
 * One workflow alone, step after step: the time between two committed steps (the HTTP call
 * included), and counted from `start()`: to the first call reaching the service, and to the
 * completed record (a tenth of it a step). The service here is in this process, to note when
 * each instance's first call arrives.
 */
async function solo() {
  const firstCall = new Map<string, number>();
  const service = await minimalService('{"ok":true}', (id) => {
    if (!firstCall.has(id)) firstCall.set(id, performance.now());
  });
  const serviceUrl = service.url;
  const watch = new Watch(true);
  const { db, engine } = await freshEngine(serviceUrl, 16, watch);
  const logic = chain('proxy');
  await engine.publish(logic);
  await warmUp(db, serviceUrl, 16, logic, 'proxy');
  await engine.workers.start();
  const toFirstCall: number[] = [];
  const endToEnd: number[] = [];
  for (let run = 0; run < SOLO_RUNS; run++) {
    const ended = watch.until(run + 1);
    const t0 = performance.now();
    const { id } = await engine.start({ logicId: logic.logicId, input: {} });
    await ended;
    toFirstCall.push(firstCall.get(id)! - t0);
    endToEnd.push((watch.commits.get(id)!.at(-1)! - t0) / STEPS);
  }
  await engine.close();
  await dropSchema(db);
  await db.close();
  await service.close();
  const perStepMs = watch.intervals();
  toFirstCall.sort((a, b) => a - b);
  endToEnd.sort((a, b) => a - b);
  return { p50: percentile(perStepMs, 50), p99: percentile(perStepMs, 99), firstCall: percentile(toFirstCall, 50), e2e: percentile(endToEnd, 50) };
}

/**
 * What a func step adds: the module run (echo, 0 or 1 recorded host call, 1 KB / 64 KB) measured
 * against the cost of one step commit (one-client commit_transition latency) in the same run.
 * Runs are spaced by one commit's time, as steps are in the engine: that is when a worker makes
 * the next instance of the module ahead of its run.
 */
async function funcOverhead() {
  const built = await buildTestModules(['passthrough', 'one-call']);
  const runtime = createFuncRuntime({ loadModule: built.load, maxMemoryPages: TEST_MEMORY_PAGES });
  const db = await openDb(url, { schema: `bench_${Date.now()}`, poolSize: 20 });
  await migrate(db);
  const commitP50 = percentile(await stepCommitLatencies(db, { workflows: 30, steps: STEPS, output: { ok: true } }), 50);
  await dropSchema(db);
  await db.close();
  const rows: { label: string; p50: number }[] = [];
  for (const [label, module, size, calls] of [
    ['0 host calls, 1 KB', 'passthrough', 1024, 0],
    ['0 host calls, 64 KB', 'passthrough', 65_536, 0],
    ['1 recorded call, 1 KB', 'one-call', 1024, 1],
    ['1 recorded call, 64 KB', 'one-call', 65_536, 1],
  ] as const) {
    const input = { pad: 'x'.repeat(size) };
    const recorded = calls === 0 ? [] : [{ n: 0, importName: 'lookup', request: input, response: { ok: true } }];
    const lat: number[] = [];
    for (let i = 0; i < 200; i++) {
      await new Promise((r) => setTimeout(r, Math.max(1, Math.round(commitP50))));
      const s0 = performance.now();
      const r = await runtime.run({
        moduleHash: built.hash[module]!,
        input,
        declaredImports: calls === 0 ? [] : ['lookup'],
        recorded,
        clock: { nowMs: 0, seed: 1 },
        timeoutMs: 10_000,
      });
      if (r.status !== 'done') throw new Error(`func bench run ended ${r.status}`);
      lat.push(performance.now() - s0);
    }
    rows.push({ label, p50: percentile(lat.sort((a, b) => a - b), 50) });
  }
  await runtime.close();
  await built.cleanup();
  return { commitP50, rows };
}

type Round = Record<string, number>;

/** Every case once, in an order that puts each engine case next to its floor. */
async function round(counter: PgCounter, serviceUrl: string): Promise<Round> {
  const r: Round = {};
  const put = (prefix: string, o: object) => {
    for (const [k, v] of Object.entries(o)) r[`${prefix}.${k}`] = v as number;
  };
  put('commit1', await floor(url!, counter, 1, Math.min(FLOOR_OPS, 500)));
  r['http1.p50'] = await httpAlone(serviceUrl, 500);
  put('httpCommit1', await floor(url!, counter, 1, Math.min(FLOOR_OPS, 500), serviceUrl));
  for (const c of CONCURRENCIES) {
    put(`commit${c}`, await floor(url!, counter, c, FLOOR_OPS));
    put(`httpCommit${c}`, await floor(url!, counter, c, FLOOR_OPS, serviceUrl));
    put(`proxy${c}`, await throughput(counter, 'proxy', serviceUrl, c));
    r[`proxy${c}.vsFloor`] = r[`proxy${c}.rate`]! / r[`httpCommit${c}.rate`]!;
    r[`proxy${c}.vsCommit`] = r[`proxy${c}.rate`]! / r[`commit${c}.rate`]!;
    if (c === 16) {
      // the same case, next to it, with every span sampled and exported (OTLP/HTTP, in process)
      const on = await traced(() => throughput(counter, 'proxy', serviceUrl, c));
      put('traced16', on.result);
      // spans of every traced step: the warm-up's and the measured ones (their starts included)
      r['traced16.spansPerStep'] = on.spans / ((WORKFLOWS + WARMUP) * STEPS);
      r['traced16.vsOff'] = r['traced16.rate']! / r['proxy16.rate']!;
    }
  }
  put('pass16', await throughput(counter, 'pass', serviceUrl, 16));
  r['pass16.vsCommit'] = r['pass16.rate']! / r['commit16.rate']!;
  put('solo', await solo());
  r['solo.target'] = r['commit1.p50']! + r['http1.p50']! + 0.3;
  r['solo.vsTarget'] = r['solo.p50']! / r['solo.target']!;
  // from start() the serial floor commits the start before the first call: one 1-client commit,
  // then a call and a commit a step; a tenth of that start commit falls to each step
  r['solo.e2eTarget'] = r['httpCommit1.p50']! + r['commit1.p50']! / STEPS + 0.3;
  r['solo.e2eVsTarget'] = r['solo.e2e']! / r['solo.e2eTarget']!;
  // the start's own commit, then the call: what a poll-free path cannot beat
  r['solo.firstCallFloor'] = r['commit1.p50']!;
  r['solo.firstCallOver'] = r['solo.firstCall']! - r['solo.firstCallFloor']!;
  const func = await funcOverhead();
  r['func.commit'] = func.commitP50;
  func.rows.forEach((row, i) => {
    r[`func${i}.p50`] = row.p50;
    r[`func${i}.share`] = row.p50 / func.commitP50;
  });
  const { db, engine } = await freshEngine(serviceUrl, 16);
  const logic = chain('pass');
  await engine.publish(logic);
  put('starts', await apiStartThroughput(engine, logic, WORKFLOWS * 2, 16));
  put('apiLayer', await apiLayerCost(engine, logic, WORKFLOWS));
  await engine.close();
  await dropSchema(db);
  await db.close();
  return r;
}

const FUNC_ROWS = ['0 host calls, 1 KB', '0 host calls, 64 KB', '1 recorded call, 1 KB', '1 recorded call, 64 KB'];

function table(m: (key: string) => number, others: GoalRow[]): string {
  const counts = (k: string) => [fmt(m(`${k}.writeTx`), 2), fmt(m(`${k}.commits`), 2), fmt(m(`${k}.walSyncs`), 2)];
  const none = ['', '', ''];
  const rows: string[][] = [
    ['floor: commit only (BEGIN; UPDATE; INSERT; COMMIT)', '1', `${fmt(m('commit1.rate'))} tx/s, p50 ${fmt(m('commit1.p50'), 2)} ms`, ...counts('commit1'), '', ''],
    ['HTTP call alone (POST to the service)', '1', `p50 ${fmt(m('http1.p50'), 2)} ms`, ...none, '', ''],
    // the serial floor of one workflow alone: each call and each commit finds its peer asleep
    ['floor: HTTP + commit, one after the other', '1', `p50 ${fmt(m('httpCommit1.p50'), 2)} ms/step`, ...counts('httpCommit1'), '', ''],
  ];
  for (const c of CONCURRENCIES) {
    const p = `proxy${c}`;
    rows.push(
      ['floor: commit only', `${c}`, `${fmt(m(`commit${c}.rate`))} tx/s`, ...counts(`commit${c}`), '', ''],
      ['floor: HTTP + commit', `${c}`, `${fmt(m(`httpCommit${c}.rate`))} steps/s`, ...counts(`httpCommit${c}`), '', ''],
      [
        'engine: proxy steps (10 a workflow)',
        `${c}`,
        `${fmt(m(`${p}.rate`))} steps/s`,
        ...counts(p),
        `${fmt(m(`${p}.vsFloor`), 2)} of HTTP+commit, ${fmt(m(`${p}.vsCommit`), 2)} of commit only`,
        [
          verdict('≥ 0.8 of floor', m(`${p}.vsFloor`) >= 0.8, fmt(m(`${p}.vsFloor`), 2)),
          verdict('≤ 1.05 write tx/step', m(`${p}.writeTx`) <= 1.05, fmt(m(`${p}.writeTx`), 2)),
          verdict('< 0.5 fsyncs/step', m(`${p}.walSyncs`) < 0.5, fmt(m(`${p}.walSyncs`), 2)),
        ].join('; '),
      ],
    );
  }
  rows.push([
    'engine: proxy steps, tracing on (every span sampled, OTLP/HTTP to an in-process receiver)',
    '16',
    `${fmt(m('traced16.rate'))} steps/s, ${fmt(m('traced16.spansPerStep'), 1)} spans/step exported`,
    ...counts('traced16'),
    `${fmt(m('traced16.vsOff'), 2)} of the same case untraced (${fmt(m('proxy16.rate'))} steps/s)`,
    verdict('≥ 0.95 of untraced', m('traced16.vsOff') >= 0.95, fmt(m('traced16.vsOff'), 2)),
  ]);
  rows.push(
    ['engine: pass steps (run in the start commit; starts counted)', '16', `${fmt(m('pass16.rate'))} steps/s`, ...counts('pass16'), `${fmt(m('pass16.vsCommit'), 2)} of commit only`, ''],
    [
      'engine: one workflow alone, proxy steps',
      '1',
      `p50 ${fmt(m('solo.p50'), 2)} ms/step (p99 ${fmt(m('solo.p99'), 2)})`,
      ...none,
      `${fmt(m('solo.vsTarget'), 2)} of target ${fmt(m('commit1.p50'), 2)} + ${fmt(m('http1.p50'), 2)} + 0.3 = ${fmt(m('solo.target'), 2)} ms; ${fmt(m('solo.p50') - m('httpCommit1.p50'), 2)} ms over the serial floor`,
      verdict('≤ 1.00 of target', m('solo.vsTarget') <= 1, fmt(m('solo.vsTarget'), 2)),
    ],
    [
      'engine: one workflow alone, start() to completed record',
      '1',
      `p50 ${fmt(m('solo.e2e'), 2)} ms/step`,
      ...none,
      `${fmt(m('solo.e2eVsTarget'), 2)} of the serial floor, the start's commit included: ${fmt(m('httpCommit1.p50'), 2)} + ${fmt(m('commit1.p50'), 2)} / ${STEPS} + 0.3 = ${fmt(m('solo.e2eTarget'), 2)} ms`,
      verdict('≤ 1.00 of target', m('solo.e2eVsTarget') <= 1, fmt(m('solo.e2eVsTarget'), 2)),
    ],
    [
      'engine: start() to the first call at the service',
      '1',
      `p50 ${fmt(m('solo.firstCall'), 2)} ms`,
      ...none,
      `${fmt(m('solo.firstCallOver'), 2)} ms over the start's commit (${fmt(m('solo.firstCallFloor'), 2)} ms)`,
      verdict('≤ 1 ms over', m('solo.firstCallOver') <= 1, `${fmt(m('solo.firstCallOver'), 2)} ms`),
    ],
    ['step commit alone (commit_transition)', '1', `p50 ${fmt(m('func.commit'), 3)} ms`, ...none, '', ''],
  );
  FUNC_ROWS.forEach((label, i) => {
    const share = m(`func${i}.share`);
    const goal = label.endsWith('1 KB') ? verdict('≤ 5% of a step commit', share <= 0.05, `${fmt(100 * share)}%`) : '';
    rows.push([`func module run, ${label}`, '1', `p50 ${fmt(m(`func${i}.p50`), 3)} ms`, ...none, `${fmt(100 * share)}% of a step commit`, goal]);
  });
  rows.push([
    'API start (POST /workflows, JWT, in a worker thread)',
    '16',
    `${fmt(m('starts.http'))} starts/s`,
    ...none,
    `${fmt(m('starts.ratio'), 2)} of engine.start() in process (${fmt(m('starts.local'))}/s); the clients' own CPU ${fmt(m('starts.clientUs'))} µs a start, on the same cores`,
    verdict('≥ 0.8 of in-process', m('starts.ratio') >= 0.8, fmt(m('starts.ratio'), 2)),
  ]);
  rows.push([
    "API start's JWT, validation and serialization (the route, its start stood in for; Fastify inject)",
    '1',
    `p50 ${fmt(m('apiLayer.own'), 2)} ms over GET /healthz (${fmt(m('apiLayer.health'), 2)} ms)`,
    ...none,
    `the whole layer, Fastify's routing and inject's request included: ${fmt(m('apiLayer.inSitu'), 2)} ms over engine.startRecord() (${fmt(m('apiLayer.local'), 2)} ms)`,
    verdict('≤ 0.2 ms a start', m('apiLayer.own') <= 0.2, `${fmt(m('apiLayer.own'), 2)} ms`),
  ]);
  for (const o of others) rows.push([o.case, o.clients, o.result, ...none, o.vs, o.goal]);
  return markdownTable(['case', 'clients', 'result', 'write tx/step', 'commits/step', 'WAL fsyncs/step', 'vs floor', 'goal: met or missed'], rows);
}

const began = performance.now();
const service = await minimalService();
const counter = await PgCounter.open(url);
const meta = new pg.Client({ connectionString: url });
await meta.connect();
const setting = async (name: string) => (await meta.query<{ v: string }>('SELECT current_setting($1) AS v', [name])).rows[0]!.v;
const version = await setting('server_version');
const fsync = await setting('fsync');
await meta.end();
const rounds: Round[] = [];
for (let i = 0; i < ROUNDS; i++) rounds.push(await round(counter, service.url));
await counter.close();
await service.close();
const m = (key: string) => median(rounds.map((r) => r[key] ?? Number.NaN));
const others = runOtherGoals(QUICK);

out(
  `engine bench${QUICK ? ' --quick' : ''}: ${WORKFLOWS} workflows × ${STEPS} steps a case, ${FLOOR_OPS} floor transactions a case, ${ROUNDS === 1 ? '1 round' : `median of ${ROUNDS} rounds`}, ` +
    `${cpus().length} cores (${cpus()[0]?.model.trim()}), ${fmt(totalmem() / 2 ** 30)} GiB ` +
    `(${fmt(freemem() / 2 ** 30)} free), Postgres ${version} (fsync ${fsync}) on the same machine`,
);
out(
  `per step: write tx = xid delta, commits = pg_stat_database.xact_commit delta, WAL fsyncs = pg_stat_wal.wal_sync delta; ` +
    `the bench's own queries subtracted (counted exactly); proxy starts not counted (done before, by another engine)`,
);
if (ROUNDS > 1) out("every ratio is the median of each round's own ratio (same round, same load): it need not equal the ratio of the medians shown");
out('');
out(table(m, others.rows));
out('');
// the floor is one write transaction and one commit per transaction by construction: if its
// counts are not 1.00, statistics were missed or leaked between cases, and no count is to be trusted
const floorKeys = ['commit1', ...CONCURRENCIES.flatMap((c) => [`commit${c}`, `httpCommit${c}`])];
const off = floorKeys.flatMap((k) => ['writeTx', 'commits'].filter((f) => Math.abs(m(`${k}.${f}`) - 1) > 0.03).map((f) => `${k}.${f} = ${fmt(m(`${k}.${f}`), 2)}`));
out(off.length === 0 ? 'check: every floor row counts 1.00 write tx and 1.00 commit per transaction' : `WARNING: floor counts off 1.00 (${off.join(', ')}): the per-step counts are not reliable`);
if (others.skipped.length > 0) out(`--quick left out ${others.skipped.map((s) => `bench/${s}`).join(' and ')}: their goals are in the full run`);
out(`each other bench's own output: ${others.logs.map((l) => relative(process.cwd(), l)).join(', ')}`);
out(`took ${fmt((performance.now() - began) / 1000)} s`);
