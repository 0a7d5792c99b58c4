/**
 * Tracing's cost in pairs: the same 10-step proxy chains at concurrency 16 run untraced, then
 * traced as `s8flow start` traces (every span sampled, OTLP to a receiver, bench/tracing.ts),
 * alternately, so the box's drift falls on both sides alike. The service runs in a process of its
 * own, as an owning service does. Prints each pair's rates and the engine process's CPU a step,
 * then the median ratio. `npm run bench` has a single-pair row of the same case (goal ≥ 0.95);
 * this is for an A/B of a tracing change, where one pair is inside the noise.
 *
 *   npx tsx bench/tracing.bench.ts     (needs DATABASE_URL; BENCH_PAIRS, default 6; BENCH_WORKFLOWS, default 1000)
 */
import { performance } from 'node:perf_hooks';
import type { LogicVersion, StepDef } from '../contracts/index.ts';
import { Engine } from '../engine/runtime/engine.ts';
import { type Db, openDb } from '../engine/store/db.ts';
import { dropSchema, migrate } from '../engine/store/migrate.ts';
import { makeLogic } from '../test/contracts/helpers.ts';
import { fmt, median, pool, serviceProcess } from './support.ts';
import { traced } from './tracing.ts';
import { Watch } from './watch.ts';

const url = process.env['DATABASE_URL'];
if (!url) throw new Error('set DATABASE_URL (scripts/with-postgres.sh starts a Postgres for you)');
const PAIRS = Number(process.env['BENCH_PAIRS'] ?? 6);
const WORKFLOWS = Number(process.env['BENCH_WORKFLOWS'] ?? 1000);
const WARMUP = 100;
const STEPS = 10;
const out = (s: string) => process.stdout.write(`${s}\n`);

const steps: Record<string, StepDef> = {};
for (let i = 0; i < STEPS; i++) steps[`s${i}`] = { kind: 'proxy', path: '/step', ...(i + 1 < STEPS ? { next: `s${i + 1}` } : {}) };
const logic: LogicVersion = makeLogic({ logicId: 'bench.traced', domain: 'bench', start: 's0', steps });
const service = await serviceProcess();
const engineOn = (db: Db, watch?: Watch) =>
  new Engine({ db, executors: { handlers: new Map([['BENCH', { url: service.url }]]) }, worker: { concurrency: 16, pollMs: 20 }, ...(watch ? { observer: watch } : {}) });

/** Steps per second and the engine's CPU µs a step: the chains started first, then measured from the workers' start to the last end. */
async function run(): Promise<{ rate: number; cpuUs: number }> {
  const db = await openDb(url!, { schema: `bench_traced_${Date.now()}`, poolSize: 20 });
  try {
    await migrate(db);
    const setup = engineOn(db);
    await setup.publish(logic);
    // warm connections and plans, as a long-running engine has them
    const warm = new Watch();
    const warmEngine = engineOn(db, warm);
    await warmEngine.workers.start();
    const warmed = warm.until(WARMUP);
    await pool(WARMUP, 16, async () => void (await warmEngine.start({ logicId: logic.logicId, input: {} })));
    await warmed;
    await warmEngine.close();
    await pool(WORKFLOWS, 16, async () => void (await setup.start({ logicId: logic.logicId, input: {} })));
    const watch = new Watch();
    const engine = engineOn(db, watch);
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await engine.workers.start();
    await watch.until(WORKFLOWS);
    const seconds = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    await engine.close();
    await setup.close();
    return { rate: (WORKFLOWS * STEPS) / seconds, cpuUs: (cpu.user + cpu.system) / (WORKFLOWS * STEPS) };
  } finally {
    await dropSchema(db);
    await db.close();
  }
}

const ratios: number[] = [];
try {
  for (let p = 0; p < PAIRS; p++) {
    const off = await run();
    const on = await traced(run);
    ratios.push(on.result.rate / off.rate);
    const perStep = on.spans / ((WORKFLOWS + WARMUP) * STEPS);
    out(
      `pair ${p + 1}: untraced ${fmt(off.rate)} steps/s (${fmt(off.cpuUs)} µs CPU a step), traced ${fmt(on.result.rate)} steps/s (${fmt(on.result.cpuUs)} µs, ${fmt(perStep, 1)} spans a step): ${fmt(on.result.rate / off.rate, 3)}`,
    );
  }
  const sorted = [...ratios].sort((a, b) => a - b);
  out(`traced / untraced over ${PAIRS} pairs: median ${fmt(median(ratios), 3)} (range ${fmt(sorted[0]!, 3)}–${fmt(sorted.at(-1)!, 3)}); goal ≥ 0.95`);
} finally {
  await service.close();
}
