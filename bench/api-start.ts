import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { SignJWT } from 'jose';
import type { LogicVersion } from '../contracts/index.ts';
import { buildApi } from '../engine/api/server.ts';
import type { Engine } from '../engine/runtime/engine.ts';
import { percentile, pool } from './support.ts';

/**
 * The HTTP clients run in a worker thread, as an owning service runs in its own process: on the
 * engine's thread they would take the CPU the server needs, which in-process starts never pay.
 */
const CLIENT = `
const http = require('node:http');
const { readFileSync } = require('node:fs');
const { parentPort, workerData: { url, headers, body, total, concurrency } } = require('node:worker_threads');
// this thread's CPU in ms (utime + stime, in Linux's 100 Hz ticks); null where /proc has no thread-self
const threadCpuMs = () => {
  try {
    const stat = readFileSync('/proc/thread-self/stat', 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) * 10;
  } catch { return null; }
};
const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
const once = () => new Promise((resolve, reject) => {
  const req = http.request(url, { method: 'POST', agent, headers: { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
    res.resume();
    res.on('end', () => (res.statusCode === 201 ? resolve() : reject(new Error('API start answered ' + res.statusCode))));
  });
  req.on('error', reject);
  req.end(body);
});
let next = 0;
const t0 = performance.now();
const cpu0 = threadCpuMs();
Promise.all(Array.from({ length: concurrency }, async () => { while (next < total) { next++; await once(); } }))
  .then(() => parentPort.postMessage({ seconds: (performance.now() - t0) / 1000, cpuMs: cpu0 === null ? null : threadCpuMs() - cpu0 }), (err) => parentPort.postMessage({ error: err.message }));
`;

const SECRET = 'bench-only-hs256-secret-0123456789abcdef';

/**
 * API start throughput: starts per second over HTTP — each a POST that validates the
 * body, verifies a JWT, starts the instance and answers its WorkflowRecord — at `concurrency`
 * clients (in a worker thread), against `engine.start()` in process on the same engine, in the same run. Workers are
 * not started, so both measure starting alone. In-process runs before and after HTTP, and the
 * ratio is taken to their mean, so drift on a shared machine shows rather than hides. The clients'
 * own CPU a start (`clientUs`) is returned beside: it is spent on the same cores as the server's.
 */
export async function apiStartThroughput(engine: Engine, logic: LogicVersion, total: number, concurrency: number) {
  const api = await buildApi({ engine, auth: { secret: SECRET, production: false } });
  const base = await api.app.listen({ host: '127.0.0.1', port: 0 });
  const jwt = await new SignJWT({ envs: [engine.env], scope: 'flow:start flow:read' })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject('bench')
    .setExpirationTime('1h')
    .sign(new TextEncoder().encode(SECRET));
  const headers = { authorization: `Bearer ${jwt}` };
  const url = `${base}/v1/envs/${engine.env}/workflows`;

  const inProcess = async (n: number) => {
    const t0 = performance.now();
    await pool(n, concurrency, async () => {
      await engine.start({ logicId: logic.logicId, input: {} });
    });
    return n / ((performance.now() - t0) / 1000);
  };
  const overHttp = async (n: number) => {
    const body = JSON.stringify({ logicId: logic.logicId, input: {} });
    const worker = new Worker(CLIENT, { eval: true, workerData: { url, headers, body, total: n, concurrency } });
    const result = await new Promise<{ seconds?: number; cpuMs?: number | null; error?: string }>((resolve) => worker.once('message', resolve));
    await worker.terminate();
    if (result.error !== undefined) throw new Error(result.error);
    return { perSecond: n / result.seconds!, clientUs: result.cpuMs == null ? Number.NaN : (result.cpuMs * 1000) / n };
  };

  await inProcess(Math.min(200, total));
  await overHttp(Math.min(200, total));
  const before = await inProcess(total);
  const { perSecond: http, clientUs } = await overHttp(total);
  const after = await inProcess(total);
  await api.close();
  const local = (before + after) / 2;
  return { http, local, before, after, ratio: http / local, clientUs };
}

/**
 * What the API layer adds to one start, two ways, each a p50 of sequential calls:
 * - `inSitu`: a POST through Fastify's `inject` (routing, the JWT check, body validation, the
 *   start, the record's serialization, without a socket) less `engine.startRecord()`, the same
 *   start in process. The two take turns, one call each, so both see the same moments of a noisy
 *   machine; the first 50 turns warm up.
 * - `own`: the route alone, its start answered at once by a stand-in for `startRecord()`, less a
 *   GET of /healthz on the same server: what the JWT check, validation and serialization cost
 *   beyond Fastify's own handling of a request. The goal (≤ 0.2 ms) names these three, so it
 *   reads this one; `inSitu` also holds inject's own request and reply.
 */
export async function apiLayerCost(engine: Engine, logic: LogicVersion, total: number) {
  const api = await buildApi({ engine, auth: { secret: SECRET, production: false } });
  const jwt = await new SignJWT({ envs: [engine.env], scope: 'flow:start flow:read' })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject('bench')
    .setExpirationTime('1h')
    .sign(new TextEncoder().encode(SECRET));
  const request = { logicId: logic.logicId, input: {} };
  const post = async () => {
    const res = await api.app.inject({
      method: 'POST',
      url: `/v1/envs/${engine.env}/workflows`,
      headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
      payload: JSON.stringify(request),
    });
    if (res.statusCode !== 201) throw new Error(`API start answered ${res.statusCode}: ${res.body}`);
  };
  const p50 = (ms: number[]) => percentile(ms.sort((a, b) => a - b), 50);
  const timed = async (f: () => Promise<unknown>, into: number[]) => {
    const t0 = performance.now();
    await f();
    into.push(performance.now() - t0);
  };

  const viaApi: number[] = [];
  const inProcess: number[] = [];
  for (let i = -50; i < total; i++) {
    await timed(post, viaApi);
    await timed(() => engine.startRecord(request), inProcess);
  }
  const answered = await engine.startRecord(request);
  // the stand-in shadows the engine's method for the route, and is removed after
  Object.defineProperty(engine, 'startRecord', { configurable: true, value: async () => answered });
  const route: number[] = [];
  const health: number[] = [];
  try {
    for (let i = -50; i < total; i++) {
      await timed(post, route);
      await timed(() => api.app.inject({ method: 'GET', url: '/healthz' }), health);
    }
  } finally {
    Reflect.deleteProperty(engine, 'startRecord');
    await api.close();
  }
  const warm = (ms: number[]) => p50(ms.slice(50));
  return {
    api: warm(viaApi),
    local: warm(inProcess),
    inSitu: warm(viaApi) - warm(inProcess),
    route: warm(route),
    health: warm(health),
    own: warm(route) - warm(health),
  };
}
