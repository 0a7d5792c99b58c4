/**
 * No env stalls another: env B's start-to-first-call latency on an idle engine and, in the same
 * run on the same engine, while env A floods it with 10,000 instances and two modules that spin
 * until their timeout. Goal: B's p99 under the flood within 2× its idle p99.
 *
 *   npx tsx bench/fairness.bench.ts [--quick]     (needs DATABASE_URL; `npm run bench` runs it)
 *
 * B's instances are one proxy step each, to a service in this process that notes when each
 * instance's first call arrives; A's flood calls a service in a child process. A probe is started
 * every PROBE_GAP_MS, one at a time, and measured from just before `start()` to the call's arrival.
 * The flood is started with the workers stopped, so the whole backlog is there when the probes
 * begin; the bench reports how much of it was left when the last probe was answered.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { LogicVersion } from '../contracts/index.ts';
import { parseEnvWeights } from '../engine/config.ts';
import { Engine } from '../engine/runtime/engine.ts';
import { openDb } from '../engine/store/db.ts';
import { dropSchema, migrate } from '../engine/store/migrate.ts';
import { asScheduler } from '../engine/store/tx.ts';
import { createFuncRuntime } from '../host-functions/index.ts';
import { makeLogic } from '../test/contracts/helpers.ts';
import { buildTestModules, TEST_MEMORY_PAGES } from '../test/host-functions/helpers/test-modules.ts';
import { fmt, percentile, pool, reportGoal, serviceProcess, verdict } from './support.ts';

const url = process.env['DATABASE_URL'];
if (!url) throw new Error('set DATABASE_URL (npm run bench starts a Postgres for you)');
const QUICK = process.argv.includes('--quick');
const FLOOD = Number(process.env['BENCH_FLOOD'] ?? (QUICK ? 2_000 : 10_000));
const PROBES = QUICK ? 40 : 100;
const PROBE_GAP_MS = 20;
const SPINNERS = Number(process.env['BENCH_SPINNERS'] ?? 2);
const CONCURRENCY = 16;
const out = (s: string) => process.stdout.write(`${s}\n`);

/** The probe service: notes when each instance's first call arrives (by X-Flow-Workflow-Id). */
async function probeService() {
  const arrived = new Map<string, number>();
  const waiters = new Map<string, () => void>();
  const server = createServer((req, res) => {
    const id = String(req.headers['x-flow-workflow-id']);
    if (!arrived.has(id)) arrived.set(id, performance.now());
    waiters.get(id)?.();
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    /** When the first call for `id` arrived, once it has. */
    firstCall: (id: string) =>
      arrived.has(id) ? Promise.resolve(arrived.get(id)!) : new Promise<number>((r) => waiters.set(id, () => r(arrived.get(id)!))),
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

const probeLogic = makeLogic({ logicId: 'bench.fair.probe', domain: 'probe', start: 'call', steps: { call: { kind: 'proxy', path: '/probe' } } });
const floodLogic = makeLogic({
  logicId: 'bench.fair.flood',
  domain: 'bench',
  start: 'a',
  steps: { a: { kind: 'proxy', path: '/step', next: 'b' }, b: { kind: 'proxy', path: '/step' } },
});

/** Start-to-first-call of PROBES instances of env B, one at a time, PROBE_GAP_MS apart (ms). */
async function probe(engine: Engine, service: Awaited<ReturnType<typeof probeService>>): Promise<number[]> {
  const ms: number[] = [];
  for (let i = 0; i < PROBES; i++) {
    const t0 = performance.now();
    const { id } = await engine.start({ logicId: probeLogic.logicId, input: { i }, env: 'tenant-b' });
    ms.push((await service.firstCall(id)) - t0);
    await new Promise((r) => setTimeout(r, PROBE_GAP_MS));
  }
  return ms.sort((a, b) => a - b);
}

const modules = await buildTestModules(['misbehave']);
const spinLogic: LogicVersion = makeLogic({
  logicId: 'bench.fair.spin',
  domain: 'bench',
  start: 'spin',
  modules: { bad: { sha256: modules.hash['misbehave']!, imports: {} } },
  steps: { spin: { kind: 'func', module: 'bad', export: 'loop', timeoutMs: 2_147_483_647, retry: { maxAttempts: 1 } } },
});
const flood = await serviceProcess();
const prober = await probeService();
const db = await openDb(url, { schema: `bench_fair_${Date.now()}`, poolSize: CONCURRENCY + 6 });
await migrate(db);
const funcs = createFuncRuntime({ loadModule: modules.load, maxMemoryPages: TEST_MEMORY_PAGES });
const engine = new Engine({
  db,
  env: 'tenant-a',
  executors: {
    handlers: new Map([
      ['BENCH', { url: flood.url }],
      ['PROBE', { url: prober.url }],
    ]),
    funcRuntime: funcs,
  },
  // BENCH_ENV_WEIGHTS (`tenant-b=4`) weights the claim's turns, as FLOW_ENV_WEIGHTS does
  worker: { concurrency: CONCURRENCY, pollMs: 20, ...(process.env['BENCH_ENV_WEIGHTS'] ? { envWeights: parseEnvWeights(process.env['BENCH_ENV_WEIGHTS']) } : {}) },
});
await engine.publish(probeLogic, 'tenant-b');
await engine.publish(floodLogic, 'tenant-a');
await engine.publishVersion('tenant-a', spinLogic, { [modules.hash['misbehave']!]: await modules.load(modules.hash['misbehave']!) });

// idle: nothing else runs (a few probes first, to warm the code paths and the connections)
await engine.workers.start();
for (let i = 0; i < 5; i++) {
  const { id } = await engine.start({ logicId: probeLogic.logicId, input: { warm: i }, env: 'tenant-b' });
  await prober.firstCall(id);
}
const idle = await probe(engine, prober);

/** Env A's backlog (and spinners, first in line) put in place with the workers stopped; then B's probes. */
async function flooded(spinners: number) {
  await engine.workers.stop();
  for (let i = 0; i < spinners; i++) await engine.start({ logicId: spinLogic.logicId, input: { i } });
  const f0 = performance.now();
  await pool(FLOOD, 16, async () => {
    await engine.start({ logicId: floodLogic.logicId, input: {} });
  });
  const startMs = performance.now() - f0;
  await engine.workers.start();
  const ms = await probe(engine, prober);
  const left = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM workflows WHERE logic_id = 'bench.fair.flood' AND state <> 'completed'`);
  const spinning = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM workflows WHERE logic_id = 'bench.fair.spin' AND state = 'processing'`);
  // the rest of the backlog runs off, the spinners are cancelled: the next phase starts clean. The
  // workers stop first: this bulk UPDATE takes row locks in no particular order, so beside the
  // workers' batched commits it could deadlock (it did, once in three runs)
  await engine.workers.stop();
  await asScheduler(db, (c) => c.query(`UPDATE workflows SET state = 'cancelled', lease_token = NULL, lease_expires_at = NULL, row_version = row_version + 1 WHERE env_id = 'tenant-a' AND state <> 'completed'`));
  return { ms, startMs, left: left.rows[0]!.n, spinning: spinning.rows[0]!.n };
}
const floodOnly = await flooded(0);
const withSpinners = await flooded(SPINNERS);

await engine.close();
await funcs.close();
await dropSchema(db);
await db.close();
await flood.close();
await prober.close();
await modules.cleanup();

const p = (xs: number[], q: number) => percentile(xs, q);
const ratio = p(withSpinners.ms, 99) / p(idle, 99);
const line = (label: string, ms: number[]) => `${label}: p50 ${fmt(p(ms, 50), 1)} ms, p99 ${fmt(p(ms, 99), 1)} ms, max ${fmt(ms.at(-1)!, 1)} ms`;
out(`fairness bench: env B start-to-first-call, ${PROBES} probes ${PROBE_GAP_MS} ms apart, concurrency ${CONCURRENCY}, one engine`);
out(`  ${line('idle engine', idle)}`);
for (const [label, r] of [
  ['env A flooding', floodOnly],
  [`env A flooding, ${SPINNERS} modules spinning`, withSpinners],
] as const) {
  out(`  ${line(`${label} (${fmt(FLOOD)} instances started in ${fmt(r.startMs / 1000, 1)} s)`, r.ms)}; A left after the last probe: ${fmt(r.left)}, spinning: ${r.spinning}`);
}
out(`  ratio p99 flooded / idle: ${fmt(p(floodOnly.ms, 99) / p(idle, 99), 2)}× without spinners, ${fmt(ratio, 2)}× with them (goal ≤ 2×)`);
reportGoal({
  case: `env B start-to-first-call p99 while env A floods ${fmt(FLOOD)} instances + ${SPINNERS} spinning modules`,
  clients: String(CONCURRENCY),
  result: `${fmt(p(withSpinners.ms, 99), 1)} ms (${fmt(p(floodOnly.ms, 99), 1)} without spinners)`,
  vs: `idle ${fmt(p(idle, 99), 1)} ms, same run`,
  goal: verdict('≤ 2× idle', ratio <= 2, `${fmt(ratio, 2)}×`),
});
