/**
 * Limits hold at the service, and cost nothing when nothing is contended:
 *  - a handler limited to 50 calls/s (burst 10): the most calls the service saw in any 1-second window (goal ≤ 60);
 *  - a handler capped at 8 calls in flight: the most the service saw in flight (goal ≤ 8);
 *  - a per-key limit of 1 over 100 keys: calls of one key that overlapped at the service (goal 0);
 *  - an unlimited handler's throughput while the rate-limited backlog waits, against alone (goal ≥ 0.9×);
 *  - steps/s with limits that are never contended against no limits, side by side (goal ≤ 10% slower).
 *
 *   npx tsx bench/limits.bench.ts [--quick]     (needs DATABASE_URL; `npm run bench` runs it)
 *
 * Everything is counted at the service (an HTTP server in this process): arrival times, calls in
 * flight, and per key. One engine process, one Postgres.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { LogicVersion, StepDef } from '../contracts/index.ts';
import type { HandlerProfile } from '../engine/executors/handlers.ts';
import { Engine } from '../engine/runtime/engine.ts';
import { type Db, openDb } from '../engine/store/db.ts';
import { dropSchema, migrate } from '../engine/store/migrate.ts';
import { makeLogic } from '../test/contracts/helpers.ts';
import { fmt, pool, reportGoal, verdict } from './support.ts';

const url = process.env['DATABASE_URL'];
if (!url) throw new Error('set DATABASE_URL (npm run bench starts a Postgres for you)');
const QUICK = process.argv.includes('--quick');
const RATED = QUICK ? 300 : 10_000;
const CAPPED = QUICK ? 400 : 10_000;
const KEYED = QUICK ? 400 : 10_000;
const FREE = QUICK ? 200 : 2_000;
const CHAINS = QUICK ? 80 : 400;
const STEPS = 10;
const CONCURRENCY = 32;
const out = (s: string) => process.stdout.write(`${s}\n`);

/** The owning service: per path, when each call arrived, the most in flight, and overlaps per key. */
async function countingService(latencyMs: (path: string) => number) {
  const arrivals = new Map<string, number[]>();
  const inFlight = new Map<string, number>();
  const maxInFlight = new Map<string, number>();
  const perKey = new Map<string, number>();
  let overlaps = 0;
  const server = createServer((req, res) => {
    const path = req.url ?? '/';
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      (arrivals.get(path) ?? arrivals.set(path, []).get(path)!).push(performance.now());
      const n = (inFlight.get(path) ?? 0) + 1;
      inFlight.set(path, n);
      maxInFlight.set(path, Math.max(n, maxInFlight.get(path) ?? 0));
      const key = path === '/keyed' ? String((JSON.parse(Buffer.concat(chunks).toString() || '{}') as { key?: string }).key) : null;
      if (key !== null) {
        const k = (perKey.get(key) ?? 0) + 1;
        perKey.set(key, k);
        if (k > 1) overlaps++;
      }
      setTimeout(() => {
        inFlight.set(path, (inFlight.get(path) ?? 1) - 1);
        if (key !== null) perKey.set(key, (perKey.get(key) ?? 1) - 1);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"ok":true}');
      }, latencyMs(path));
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    count: (path: string) => arrivals.get(path)?.length ?? 0,
    arrivals: (path: string) => arrivals.get(path) ?? [],
    maxInFlight: (path: string) => maxInFlight.get(path) ?? 0,
    overlaps: () => overlaps,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** The most arrivals in any window of `ms` (two pointers over the sorted times). */
function maxInWindow(times: number[], ms: number): number {
  const t = [...times].sort((a, b) => a - b);
  let best = 0;
  for (let i = 0, j = 0; j < t.length; j++) {
    while (t[j]! - t[i]! >= ms) i++;
    best = Math.max(best, j - i + 1);
  }
  return best;
}

function oneCall(logicId: string, handler: string, path: string, extra: Partial<StepDef> = {}): LogicVersion {
  return makeLogic({ logicId, domain: 'bench', start: 'call', steps: { call: { kind: 'proxy', handler, path, input: 'input', next: null, ...extra } as StepDef } });
}

function chain(logicId: string, handler: string): LogicVersion {
  const steps: Record<string, StepDef> = {};
  for (let i = 0; i < STEPS; i++) steps[`s${i}`] = { kind: 'proxy', handler, path: '/chain', ...(i + 1 < STEPS ? { next: `s${i + 1}` } : {}) };
  return makeLogic({ logicId, domain: 'bench', start: 's0', steps });
}

async function until(what: string, done: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const svc = await countingService((path) => (path === '/capped' ? 10 : path === '/keyed' ? 5 : 0));
const handlers = (limits: Record<string, HandlerProfile['limit']>) =>
  new Map(['RATED', 'CAPPED', 'KEYED', 'FREE', 'CHAIN'].map((n) => [n, { url: svc.url, ...(limits[n] ? { limit: limits[n] } : {}) }]));
const schema = `bench_limits_${Date.now()}`;
const db: Db = await openDb(url, { schema, poolSize: CONCURRENCY + 8 });
await migrate(db);
const engine = new Engine({
  db,
  env: 'bench',
  executors: { handlers: handlers({ RATED: { concurrency: null, rate: 50, burst: 10 }, CAPPED: { concurrency: 8, rate: null, burst: null } }) },
  worker: { concurrency: CONCURRENCY, pollMs: 20 },
});
const logics = {
  rated: oneCall('bench.rated', 'rated', '/rated'),
  capped: oneCall('bench.capped', 'capped', '/capped'),
  keyed: oneCall('bench.keyed', 'keyed', '/keyed', { concurrency: { key: 'input.key', limit: 1 } } as Partial<StepDef>),
  free: oneCall('bench.free', 'free', '/free'),
};
for (const l of Object.values(logics)) await engine.publish(l, 'bench');
const startMany = (logic: LogicVersion, n: number, input: (i: number) => unknown = () => ({})) =>
  pool(n, 16, async (i) => {
    await engine.start({ env: 'bench', logicId: logic.logicId, input: input(i) });
  });

out(`limits bench${QUICK ? ' --quick' : ''}: one engine (${CONCURRENCY} executors), one Postgres, the service in this process`);

// an unlimited handler alone, for the comparison below
await engine.workers.start();
let began = performance.now();
await startMany(logics.free, FREE);
await until('free alone', () => svc.count('/free') >= FREE, 600_000);
const freeAlone = FREE / ((performance.now() - began) / 1000);

// the rate-limited backlog, and the same unlimited batch while it waits
await engine.workers.stop();
await startMany(logics.rated, RATED);
const ratedBegan = performance.now();
await engine.workers.start();
await until('rated began', () => svc.count('/rated') >= Math.min(RATED, 20), 600_000);
began = performance.now();
await startMany(logics.free, FREE);
await until('free beside the rated backlog', () => svc.count('/free') >= 2 * FREE, 600_000);
const freeBeside = FREE / ((performance.now() - began) / 1000);
await until('rated done', () => svc.count('/rated') >= RATED, 3_600_000);
const ratedSeconds = (performance.now() - ratedBegan) / 1000;
const ratedMax = maxInWindow(svc.arrivals('/rated'), 1000);
out(`rate 50/s burst 10: ${fmt(RATED)} calls in ${fmt(ratedSeconds, 1)} s (${fmt(RATED / ratedSeconds, 1)}/s), the most in any 1 s window ${ratedMax} (goal ≤ 60)`);
out(`an unlimited handler: ${fmt(freeAlone)} calls/s alone, ${fmt(freeBeside)} calls/s beside the rate-limited backlog (${fmt(freeBeside / freeAlone, 2)}×)`);

began = performance.now();
await startMany(logics.capped, CAPPED);
await until('capped done', () => svc.count('/capped') >= CAPPED, 3_600_000);
const cappedSeconds = (performance.now() - began) / 1000;
out(`concurrency 8 (service latency 10 ms): ${fmt(CAPPED)} calls in ${fmt(cappedSeconds, 1)} s, the most in flight ${svc.maxInFlight('/capped')} (goal ≤ 8)`);

began = performance.now();
await startMany(logics.keyed, KEYED, (i) => ({ key: `k${i % 100}` }));
await until('keyed done', () => svc.count('/keyed') >= KEYED, 3_600_000);
const keyedSeconds = (performance.now() - began) / 1000;
out(`per-key limit 1 over 100 keys (service latency 5 ms): ${fmt(KEYED)} calls in ${fmt(keyedSeconds, 1)} s, overlaps ${svc.overlaps()} (goal 0), the most in flight ${svc.maxInFlight('/keyed')}`);
await engine.close();

// overhead: the same chains against a handler with no limit and one with limits never reached,
// two engines on one schema, alternated so both see the same machine
const uncontended = new Engine({
  db,
  env: 'bench',
  executors: { handlers: handlers({ CHAIN: { concurrency: 1_000_000, rate: 1_000_000, burst: 1_000_000 } }) },
  worker: { concurrency: CONCURRENCY, pollMs: 20 },
});
const unlimited = new Engine({ db, env: 'bench', executors: { handlers: handlers({}) }, worker: { concurrency: CONCURRENCY, pollMs: 20 } });
const chainLogic = chain('bench.chain', 'chain');
await unlimited.publish(chainLogic, 'bench');
const rates: Record<'none' | 'limits', number[]> = { none: [], limits: [] };
for (let round = 0; round < (QUICK ? 2 : 3); round++) {
  for (const [name, e] of [['none', unlimited], ['limits', uncontended]] as const) {
    const before = svc.count('/chain');
    await e.workers.start();
    const t0 = performance.now();
    await pool(CHAINS, 16, async () => {
      await e.start({ env: 'bench', logicId: chainLogic.logicId, input: {} });
    });
    await until('chains done', () => svc.count('/chain') >= before + CHAINS * STEPS, 600_000);
    rates[name].push((CHAINS * STEPS) / ((performance.now() - t0) / 1000));
    await e.workers.stop();
  }
}
const best = (xs: number[]) => Math.max(...xs);
const overhead = 1 - best(rates.limits) / best(rates.none);
out(`uncontended limits: ${fmt(best(rates.limits))} steps/s against ${fmt(best(rates.none))} steps/s without (best of ${rates.none.length} rounds each): ${fmt(100 * overhead, 1)}% slower (goal ≤ 10%)`);
await uncontended.close();
await unlimited.close();
await dropSchema(db);
await db.close();
await svc.close();

reportGoal({ case: `${fmt(RATED)} instances against a handler limited to 50 calls/s, burst 10`, clients: String(CONCURRENCY), result: `most in any 1 s: ${ratedMax}`, vs: `${fmt(RATED / ratedSeconds, 1)} calls/s overall`, goal: verdict('≤ 60', ratedMax <= 60, String(ratedMax)) });
reportGoal({ case: `${fmt(CAPPED)} instances against a handler capped at 8 in flight`, clients: String(CONCURRENCY), result: `most in flight: ${svc.maxInFlight('/capped')}`, vs: `${fmt(CAPPED / cappedSeconds)} calls/s`, goal: verdict('≤ 8', svc.maxInFlight('/capped') <= 8, String(svc.maxInFlight('/capped'))) });
reportGoal({ case: `${fmt(KEYED)} instances, per-key limit 1 over 100 keys`, clients: String(CONCURRENCY), result: `overlaps: ${svc.overlaps()}`, vs: `${fmt(KEYED / keyedSeconds)} calls/s`, goal: verdict('0', svc.overlaps() === 0, String(svc.overlaps())) });
reportGoal({ case: 'an unlimited handler beside the rate-limited backlog', clients: String(CONCURRENCY), result: `${fmt(freeBeside)} calls/s`, vs: `alone ${fmt(freeAlone)} calls/s`, goal: verdict('≥ 0.9× alone', freeBeside >= 0.9 * freeAlone, `${fmt(freeBeside / freeAlone, 2)}×`) });
reportGoal({ case: `uncontended limits, ${CHAINS} × ${STEPS}-step chains`, clients: String(CONCURRENCY), result: `${fmt(best(rates.limits))} steps/s`, vs: `no limits ${fmt(best(rates.none))} steps/s`, goal: verdict('≤ 10% slower', overhead <= 0.1, `${fmt(100 * overhead, 1)}%`) });
