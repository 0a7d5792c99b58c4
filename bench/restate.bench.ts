/**
 * The speed anchor: the same 10-step HTTP workflow on Restate and on the engine, in one run on one
 * machine, against one owning service (a process of its own). Two cases each:
 *   - seq: one workflow alone, start to end, one after another (latency a step);
 *   - 1,000 in flight: 1,000 workflows started at once, steps/s from the first start to the last end.
 * Beside each side's rate: what it synced a step (Restate: RocksDB WAL syncs from its own metrics,
 * fsync on as it ships; the engine: Postgres WAL fsyncs from pg_stat_wal).
 *
 *   npx tsx bench/restate.bench.ts [--quick]     (needs DATABASE_URL; `npm run bench` runs it)
 *
 * Restate is `@restatedev/restate-server` (the binary ships in the npm package) with
 * `@restatedev/restate-sdk`: a service handler that runs each step as `ctx.run` around the same
 * HTTP POST the engine's proxy step makes, with an idempotency key. Its server listens on loopback
 * only. At boot it looks up its latest release on GitHub, which this machine's closed network
 * refuses at once; nothing else leaves loopback.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { createServer as createNetServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createRequire } from 'node:module';
import type * as Restate from '@restatedev/restate-sdk';
import type { LogicVersion, StepDef } from '../contracts/index.ts';
import { Engine } from '../engine/runtime/engine.ts';
import { openDb } from '../engine/store/db.ts';
import { dropSchema, migrate } from '../engine/store/migrate.ts';
import { makeLogic } from '../test/contracts/helpers.ts';
import { fmt, median, PgCounter, percentile, reportGoal, serviceProcess, verdict } from './support.ts';
import { Watch } from './watch.ts';

const url = process.env['DATABASE_URL'];
if (!url) throw new Error('set DATABASE_URL (npm run bench starts a Postgres for you)');
const QUICK = process.argv.includes('--quick');
const STEPS = 10;
const IN_FLIGHT = Number(process.env['BENCH_IN_FLIGHT'] ?? 1000);
const SEQ_RUNS = QUICK ? 20 : 50;
/** Workflows each side runs before it is measured, on the connections it is measured on. */
const WARMUP = 200;
const ROUNDS = QUICK ? 1 : 3;
/** The engine's workers for the 1,000-in-flight case: the most it is run with (docs/performance.md). */
const ENGINE_CONCURRENCY = 64;
const out = (s: string) => process.stdout.write(`${s}\n`);

// The SDK logs a line per invocation at INFO (console I/O on its side of the measurement); it reads
// RESTATE_LOGGING when it is imported.
process.env['RESTATE_LOGGING'] ??= 'WARN';
const restate: typeof Restate = await import('@restatedev/restate-sdk');

// The Restate SDK calls Promise.withResolvers (ES2024, Node 22); Node 20 lacks it.
if (!('withResolvers' in Promise)) {
  Object.defineProperty(Promise, 'withResolvers', {
    value<T>() {
      let resolve!: (v: T) => void;
      let reject!: (e: unknown) => void;
      const promise = new Promise<T>((res, rej) => {
        resolve = res;
        reject = rej;
      });
      return { promise, resolve, reject };
    },
  });
}

async function freePort(): Promise<number> {
  const s = createNetServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** POSTs `body` to `target` and resolves with the response text (throws on a non-2xx). */
function post(agent: http.Agent, target: string, body: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = http.request(target, { method: 'POST', agent, timeout: 120_000, headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        text += c;
      });
      res.on('end', () => ((res.statusCode ?? 0) < 300 ? resolve(text) : reject(new Error(`${target} answered ${res.statusCode}: ${text}`))));
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error(`${target} did not answer within 120 s`)));
    req.end(body);
  });
}

interface Side {
  /** Milliseconds a step, one workflow alone (median over the runs), and its p99. */
  seq(): Promise<{ p50: number; p99: number }>;
  /** Steps/s and syncs a step with IN_FLIGHT workflows started at once. */
  burst(): Promise<{ rate: number; syncs: number }>;
  close(): Promise<void>;
}

/** Restate's server, the SDK endpoint in this process, registered with the server. */
async function restateSide(serviceUrl: string): Promise<Side> {
  const [ingress, admin, fabric] = [await freePort(), await freePort(), await freePort()];
  const dir = mkdtempSync(join(tmpdir(), 'restate-bench-'));
  const binary = createRequire(import.meta.url).resolve(`@restatedev/restate-server-${process.platform}-${process.arch}/bin/restate-server`);
  const server: ChildProcess = spawn(binary, ['--no-logo', '--base-dir', dir], {
    env: {
      ...process.env,
      RESTATE_LISTEN_MODE: 'tcp',
      RESTATE_BIND_IP: '127.0.0.1',
      RESTATE_BIND_PORT: String(fabric),
      RESTATE_ADMIN__BIND_PORT: String(admin),
      RESTATE_INGRESS__BIND_PORT: String(ingress),
      RESTATE_DISABLE_TELEMETRY: 'true',
      RESTATE_LOG_FILTER: 'error',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  process.once('exit', () => server.kill('SIGKILL'));
  const agent = new http.Agent({ keepAlive: true, maxSockets: IN_FLIGHT });
  const serviceAgent = new http.Agent({ keepAlive: true, maxSockets: 256 });
  for (let waited = 0; ; waited += 100) {
    const healthy = await new Promise<boolean>((r) => http.get(`http://127.0.0.1:${admin}/health`, (res) => r(res.statusCode === 200)).on('error', () => r(false)));
    if (healthy) break;
    if (waited > 60_000) throw new Error('restate-server did not become healthy within 60 s');
    await new Promise((r) => setTimeout(r, 100));
  }

  const bench = restate.service({
    name: 'Bench',
    handlers: {
      run: async (ctx: Restate.Context): Promise<string> => {
        const id = ctx.request().id;
        for (let i = 0; i < STEPS; i++) {
          await ctx.run(`s${i}`, async () => {
            const text = await new Promise<string>((resolve, reject) => {
              const req = http.request(`${serviceUrl}/step`, { method: 'POST', agent: serviceAgent, headers: { 'content-type': 'application/json', 'idempotency-key': `${id}:${i}` } }, (res) => {
                let t = '';
                res.setEncoding('utf8');
                res.on('data', (c: string) => {
                  t += c;
                });
                res.on('end', () => resolve(t));
              });
              req.on('error', reject);
              req.end('{}');
            });
            return JSON.parse(text) as { ok: boolean };
          });
        }
        return 'ok';
      },
    },
  });
  const endpointPort = await freePort();
  await restate.endpoint().bind(bench).listen(endpointPort);
  await post(agent, `http://127.0.0.1:${admin}/deployments`, JSON.stringify({ uri: `http://127.0.0.1:${endpointPort}`, force: true }));

  const invoke = () => post(agent, `http://127.0.0.1:${ingress}/Bench/run`, '{}');
  const walSynced = async (): Promise<number> => {
    const text = await new Promise<string>((resolve, reject) => {
      http
        .get(`http://127.0.0.1:${fabric}/metrics`, (res) => {
          let t = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => {
            t += c;
          });
          res.on('end', () => resolve(t));
        })
        .on('error', reject);
    });
    let n = 0;
    for (const line of text.split('\n')) if (line.startsWith('restate_rocksdb_wal_synced_total{')) n += Number(line.slice(line.lastIndexOf(' ') + 1));
    return n;
  };
  // warm up: the server's partitions and the endpoint's connections, as for the engine
  await Promise.all(Array.from({ length: WARMUP }, invoke));

  return {
    async seq() {
      const perStep: number[] = [];
      for (let i = 0; i < SEQ_RUNS; i++) {
        const t0 = performance.now();
        await invoke();
        perStep.push((performance.now() - t0) / STEPS);
      }
      perStep.sort((a, b) => a - b);
      return { p50: percentile(perStep, 50), p99: percentile(perStep, 99) };
    },
    async burst() {
      const before = await walSynced();
      const t0 = performance.now();
      await Promise.all(Array.from({ length: IN_FLIGHT }, invoke));
      const seconds = (performance.now() - t0) / 1000;
      const synced = (await walSynced()) - before;
      return { rate: (IN_FLIGHT * STEPS) / seconds, syncs: synced / (IN_FLIGHT * STEPS) };
    },
    async close() {
      agent.destroy();
      serviceAgent.destroy();
      server.kill('SIGTERM');
      await new Promise<void>((r) => (server.exitCode !== null ? r() : server.once('exit', () => r())));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function chain(): LogicVersion {
  const steps: Record<string, StepDef> = {};
  for (let i = 0; i < STEPS; i++) steps[`s${i}`] = { kind: 'proxy', path: '/step', ...(i + 1 < STEPS ? { next: `s${i + 1}` } : {}) };
  return makeLogic({ logicId: 'bench.anchor', domain: 'bench', start: 's0', steps });
}

/** The engine on the bench's Postgres, in this process, as `s8flow start` runs it. */
async function engineSide(serviceUrl: string, counter: PgCounter): Promise<Side> {
  const logic = chain();
  const schema = `bench_anchor_${Date.now()}`;
  const open = async (watch: Watch) => {
    const db = await openDb(url!, { schema, poolSize: ENGINE_CONCURRENCY + 8 });
    const engine = new Engine({ db, executors: { handlers: new Map([['BENCH', { url: serviceUrl }]]) }, worker: { concurrency: ENGINE_CONCURRENCY }, observer: watch });
    await engine.workers.start();
    return { db, engine };
  };
  {
    const db = await openDb(url!, { schema, poolSize: 4 });
    await migrate(db);
    await new Engine({ db, executors: { handlers: new Map([['BENCH', { url: serviceUrl }]]) } }).publish(logic);
    await db.close();
  }
  const startAll = async (engine: Engine, n: number) => {
    await Promise.all(Array.from({ length: n }, () => engine.start({ logicId: logic.logicId, input: {} })));
  };
  return {
    async seq() {
      const watch = new Watch();
      const { db, engine } = await open(watch);
      const warm = watch.until(WARMUP);
      await startAll(engine, WARMUP);
      await warm;
      const perStep: number[] = [];
      for (let i = 0; i < SEQ_RUNS; i++) {
        const ended = watch.until(WARMUP + i + 1);
        const t0 = performance.now();
        await engine.start({ logicId: logic.logicId, input: {} });
        await ended;
        perStep.push((performance.now() - t0) / STEPS);
      }
      await engine.close();
      await db.close();
      perStep.sort((a, b) => a - b);
      return { p50: percentile(perStep, 50), p99: percentile(perStep, 99) };
    },
    async burst() {
      let seconds = 0;
      // warmed on the connections it is measured on, as a long-running engine's are (a new backend
      // compiles the engine's functions and plans their statements again) and as Restate's are
      const watch = new Watch();
      const { db, engine } = await open(watch);
      const warm = watch.until(WARMUP);
      await startAll(engine, WARMUP);
      await warm;
      const counted = await counter.measure(async (ended) => {
        const done = watch.until(WARMUP + IN_FLIGHT);
        const t0 = performance.now();
        await startAll(engine, IN_FLIGHT);
        await done;
        seconds = (performance.now() - t0) / 1000;
        await ended();
        await engine.close();
        await db.close();
      });
      return { rate: (IN_FLIGHT * STEPS) / seconds, syncs: counted.walSyncs / (IN_FLIGHT * STEPS) };
    },
    async close() {
      const db = await openDb(url!, { schema, poolSize: 1 });
      await dropSchema(db);
      await db.close();
    },
  };
}

const service = await serviceProcess();
const counter = await PgCounter.open(url);
const rounds: Record<string, number>[] = [];
for (let r = 0; r < ROUNDS; r++) {
  // each side alone on the machine while it is measured; the order alternates between rounds
  const round: Record<string, number> = {};
  const sides = r % 2 === 0 ? (['restate', 'engine'] as const) : (['engine', 'restate'] as const);
  for (const name of sides) {
    const side = name === 'restate' ? await restateSide(service.url) : await engineSide(service.url, counter);
    const seq = await side.seq();
    const burst = await side.burst();
    await side.close();
    Object.assign(round, { [`${name}.seqP50`]: seq.p50, [`${name}.seqP99`]: seq.p99, [`${name}.rate`]: burst.rate, [`${name}.syncs`]: burst.syncs });
  }
  round['rateRatio'] = round['engine.rate']! / round['restate.rate']!;
  round['seqRatio'] = round['engine.seqP50']! / round['restate.seqP50']!;
  rounds.push(round);
}
await counter.close();
await service.close();
const m = (k: string) => median(rounds.map((r) => r[k]!));

out(`restate anchor${QUICK ? ' --quick' : ''}: ${STEPS}-step HTTP workflow, ${IN_FLIGHT} in flight, ${SEQ_RUNS} alone a round, ${ROUNDS === 1 ? '1 round' : `median of ${ROUNDS} rounds`}`);
out(`Restate  seq p50 ${fmt(m('restate.seqP50'), 2)} ms/step (p99 ${fmt(m('restate.seqP99'), 2)}); ${IN_FLIGHT} in flight ${fmt(m('restate.rate'))} steps/s, ${fmt(m('restate.syncs'), 3)} WAL syncs/step`);
out(`engine   seq p50 ${fmt(m('engine.seqP50'), 2)} ms/step (p99 ${fmt(m('engine.seqP99'), 2)}); ${IN_FLIGHT} in flight ${fmt(m('engine.rate'))} steps/s, ${fmt(m('engine.syncs'), 3)} WAL fsyncs/step (${ENGINE_CONCURRENCY} workers)`);
out(`engine/Restate: throughput ${fmt(m('rateRatio'), 2)}, seq latency ${fmt(m('seqRatio'), 2)} (lower is faster)`);

reportGoal({
  case: `anchor: Restate, ${STEPS}-step HTTP workflow, ${IN_FLIGHT} in flight`,
  clients: `${IN_FLIGHT}`,
  result: `${fmt(m('restate.rate'))} steps/s, ${fmt(m('restate.syncs'), 3)} WAL syncs/step; engine ${fmt(m('engine.rate'))} steps/s, ${fmt(m('engine.syncs'), 3)} fsyncs/step`,
  vs: `engine ${fmt(m('rateRatio'), 2)}× Restate's steps/s`,
  goal: verdict('≥ 1.00× Restate', m('rateRatio') >= 1, `${fmt(m('rateRatio'), 2)}×`),
});
reportGoal({
  case: `anchor: Restate, ${STEPS}-step HTTP workflow alone`,
  clients: '1',
  result: `Restate p50 ${fmt(m('restate.seqP50'), 2)} ms/step; engine p50 ${fmt(m('engine.seqP50'), 2)} ms/step, start to completed record`,
  vs: `engine ${fmt(m('seqRatio'), 2)}× Restate's time a step`,
  goal: '',
});
process.exit(0);
