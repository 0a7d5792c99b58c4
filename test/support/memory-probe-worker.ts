/**
 * An engine process for memory measurements (test/durability/waiting-memory.test.ts): runs a
 * worker pool on DATABASE_URL / FLOW_SCHEMA / FLOW_ENV whose `func` steps succeed at once, and
 * prints one JSON line per sample — after PROBE_WARMUP_MS of polling, then five more spread over
 * PROBE_MEASURE_MS, the last one `measured` — with its memory after a full GC (run node with --expose-gc) and how many connections its
 * pool checked out (each poll cycle checks out one per timer batch and one per claim), and one
 * `asked` sample whenever it receives SIGUSR2. It keeps
 * polling afterwards until SIGTERM, so the test can wake instances and watch them run here.
 *
 *   node --expose-gc --import tsx test/support/memory-probe-worker.ts
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Engine } from '../../engine/runtime/engine.ts';
import { openDb } from '../../engine/store/db.ts';

const env = (name: string, fallback?: string): string => {
  const v = process.env[name] ?? fallback;
  if (v === undefined) throw new Error(`set ${name}`);
  return v;
};

const db = await openDb(env('DATABASE_URL'), { schema: env('FLOW_SCHEMA'), poolSize: 8 });
let checkouts = 0;
db.pool.on('acquire', () => {
  checkouts++;
});
const engine = new Engine({
  db,
  env: env('FLOW_ENV'),
  executors: { func: async () => ({ status: 'succeeded', output: { ran: true } }) },
  worker: { pollMs: Number(env('PROBE_POLL_MS', '250')) },
  observer: { onError: (id, err) => process.stderr.write(`error${id ? ` in ${id}` : ''}: ${(err as Error).message}\n`) },
});

function sample(phase: string): void {
  (globalThis as { gc?: () => void }).gc?.();
  const m = process.memoryUsage();
  const line = { phase, rss: m.rss, heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external, checkouts, at: Date.now() };
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

let stopping = false;
const stop = new Promise<void>((resolve) => {
  const go = () => {
    stopping = true;
    resolve();
  };
  process.once('SIGTERM', go);
  process.once('SIGINT', go);
});

// a test may ask for a sample at a moment of its choosing (after it parked more instances)
process.on('SIGUSR2', () => sample('asked'));

await engine.workers.start();
process.stdout.write(`${JSON.stringify({ phase: 'started', pollMs: engine.workers.pollMs, pid: process.pid })}\n`);
await sleep(Number(env('PROBE_WARMUP_MS', '3000')));
sample('warm');
// a few samples on the way, to show the curve and not just its ends
const measureMs = Number(env('PROBE_MEASURE_MS', '10000'));
for (let i = 1; i <= 5 && !stopping; i++) {
  await sleep(measureMs / 5);
  if (!stopping) sample(i < 5 ? 'sample' : 'measured');
}
await stop;
await engine.close();
await db.close();
