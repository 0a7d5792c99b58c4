// What a func step's module run costs next to the step's commit, from one run on one database:
//   npm run bench:func                 (Postgres 15: scripts/with-postgres.sh, or DATABASE_URL)
//   npx tsx bench/func.bench.ts        (in-memory PGlite when DATABASE_URL is unset)
//   … -- --quick                       (fewer samples)
// Goal (docs/performance.md): a 1 KB module run with 0–1 host calls ≤ 5% of one step's commit (p50).
// Runs go through the runtime as the engine makes them: on this thread, metered (inline-runner.ts).
// They are spaced by one commit's time, as steps are in the engine, so the thread is idle when a
// run arrives; "back to back" leaves it no idle time at all. "On a worker" is the same spaced run
// through a runtime with runInline: false (the way every run went before). The "this thread"
// columns call the module directly, with no runtime around it: back to back (hot caches: the
// floor any design can reach) and spaced (what a thread that was idle pays anyway).
import { performance } from 'node:perf_hooks';
import type { LogicVersion, StepDef } from '../contracts/index.ts';
import { funcExecutor } from '../engine/executors/func.ts';
import type { Executor } from '../engine/executors/index.ts';
import { Engine } from '../engine/runtime/engine.ts';
import { type Db, openDb } from '../engine/store/db.ts';
import { dropSchema, migrate } from '../engine/store/migrate.ts';
import { createFuncRuntime, type FuncRunRequest } from '../host-functions/index.ts';
import { ModuleCache } from '../host-functions/runtime/module-cache.ts';
import type { RunTask } from '../host-functions/runtime/protocol.ts';
import { type Instance, instantiate, runModule } from '../host-functions/runtime/run-module.mjs';
import { buildTestModules, TEST_MEMORY_PAGES } from '../test/host-functions/helpers/test-modules.ts';
import { makeLogic } from '../test/contracts/helpers.ts';
import { fmt, percentile } from './support.ts';
import { Watch } from './watch.ts';
import { stepCommitLatencies } from './step-commit.ts';

const QUICK = process.argv.includes('--quick');
const RUNS = QUICK ? 150 : 500;
const GOAL = 0.05;
const out = (s: string) => process.stdout.write(`${s}\n`);

const payload = (bytes: number) => ({ data: 'x'.repeat(bytes - 11) }); // 11 = {"data":""}

interface Case {
  label: string;
  module: 'passthrough' | 'one-call';
  bytes: number;
  goal: boolean;
}
const CASES: Case[] = [
  { label: '0 host calls, 1 KB', module: 'passthrough', bytes: 1024, goal: true },
  { label: '1 recorded call, 1 KB', module: 'one-call', bytes: 1024, goal: true },
  { label: '0 host calls, 64 KB', module: 'passthrough', bytes: 65_536, goal: false },
  { label: '1 recorded call, 64 KB', module: 'one-call', bytes: 65_536, goal: false },
];

async function samples(n: number, gapMs: number, once: () => Promise<unknown>): Promise<number[]> {
  for (let i = 0; i < 20; i++) await once();
  const lat: number[] = [];
  for (let i = 0; i < n; i++) {
    if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs));
    const s0 = performance.now();
    await once();
    lat.push(performance.now() - s0);
  }
  return lat.sort((a, b) => a - b);
}

/**
 * Func steps in the engine: one workflow at a time, a chain of 10 steps each running the 1 KB
 * passthrough module, timed between two committed steps. Three executors, alternating by round:
 * the engine's own, which starts a step's module run while the commit that prepared it is in
 * flight; the same executor called only once that commit has landed (as before `ahead`); and
 * no module at all (an executor that answers at once). The first two less the third are what
 * the module run adds to a step in the engine.
 */
async function inEngine(db: Db, runtime: ReturnType<typeof createFuncRuntime>, onWorkers: ReturnType<typeof createFuncRuntime>, hash: string, bytes: Uint8Array) {
  const steps: Record<string, StepDef> = {};
  for (let i = 0; i < 10; i++) steps[`s${i}`] = { kind: 'func', module: 'echo', input: 'input', ...(i < 9 ? { next: `s${i + 1}` } : {}) };
  const logic: LogicVersion = makeLogic({ logicId: 'bench.func', domain: 'bench', start: 's0', modules: { echo: { sha256: hash, imports: {} } }, steps });
  const early = funcExecutor(runtime, async () => {
    throw new Error('the passthrough module makes no host call');
  });
  const variants: Record<'ahead' | 'worker' | 'after' | 'none', Executor<'func'> | null> = {
    ahead: null, // the engine's executor, made from funcRuntime
    worker: funcExecutor(onWorkers, async () => { throw new Error('no host call'); }), // the same, runs on a worker
    after: (def, a) => early(def, a), // no `ahead`: the run starts when the attempt does
    none: async (_def, a) => ({ status: 'succeeded', output: a.input }),
  };
  const engines = Object.entries(variants).map(([name, func]) => {
    const watch = new Watch(true);
    const engine = new Engine({ db, executors: func === null ? { funcRuntime: runtime } : { func }, worker: { concurrency: 4, pollMs: 20 }, observer: watch });
    return { name, watch, engine, ran: 0 };
  });
  await engines[0]!.engine.publishVersion('default', logic, { [hash]: bytes });
  const input = payload(1024);
  const runs = async (e: (typeof engines)[number], n: number) => {
    await e.engine.workers.start();
    for (let i = 0; i < n; i++) {
      const ended = e.watch.until(++e.ran);
      await e.engine.start({ logicId: logic.logicId, input });
      await ended;
    }
    await e.engine.workers.stop();
  };
  for (const e of engines) {
    await runs(e, 3);
    e.watch.commits.clear();
  }
  for (let round = 0; round < (QUICK ? 3 : 5); round++) for (const e of engines) await runs(e, QUICK ? 5 : 10);
  for (const e of engines) await e.engine.close();
  const p50 = (name: string) => percentile(engines.find((e) => e.name === name)!.watch.intervals(), 50);
  return { ahead: p50('ahead'), worker: p50('worker'), after: p50('after'), none: p50('none') };
}

const url = process.env['DATABASE_URL'];
const db: Db = await openDb(url, { schema: `bench_func_${Date.now()}` });
await migrate(db);
const built = await buildTestModules(['passthrough', 'one-call']);
const runtime = createFuncRuntime({ loadModule: built.load, maxMemoryPages: TEST_MEMORY_PAGES });
const onWorkers = createFuncRuntime({ loadModule: built.load, maxMemoryPages: TEST_MEMORY_PAGES, runInline: false });
try {
  const commits = await stepCommitLatencies(db, { workflows: QUICK ? 10 : 30, steps: 10, output: payload(1024) });
  const commitP50 = percentile(commits, 50);
  const gapMs = Math.max(1, Math.round(commitP50));

  const request = (c: Case): FuncRunRequest => {
    const input = payload(c.bytes);
    return {
      moduleHash: built.hash[c.module]!,
      exportName: 'run',
      input,
      declaredImports: c.module === 'one-call' ? ['lookup'] : [],
      recorded: c.module === 'one-call' ? [{ n: 0, importName: 'lookup', request: input, response: input }] : [],
      clock: { nowMs: 0, seed: 1 },
      timeoutMs: 10_000,
    };
  };
  const viaRuntime = (req: FuncRunRequest, rt = runtime) => async () => {
    const r = await rt.run(req);
    if (r.status !== 'done') throw new Error(`bench run ended ${r.status}: ${JSON.stringify(r)}`);
  };
  /** The same run on this thread, on an instance made ahead or put back after the last run, as the worker does. */
  const onThisThread = async (c: Case, gapMs: number) => {
    const req = request(c);
    // the module as the runtime compiles it for a worker (its state exported)
    const { module, state } = await new ModuleCache(built.load, TEST_MEMORY_PAGES, 1, null).get(req.moduleHash);
    const task: RunTask = {
      id: 0,
      moduleHash: req.moduleHash,
      module,
      state,
      exportName: 'run',
      inputJson: JSON.stringify(req.input),
      declaredImports: req.declaredImports,
      recorded: req.recorded,
      clock: req.clock,
      maxHostAllocBytes: 1 << 30,
    };
    const lat: number[] = [];
    let ready: Instance | null = null;
    for (let i = 0; i < RUNS; i++) {
      ready ??= await instantiate(module, req.declaredImports, task.state);
      if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs));
      const s0 = performance.now();
      const { outcome, reusable } = await runModule(task, () => {}, ready);
      lat.push(performance.now() - s0);
      if (outcome.kind !== 'done') throw new Error(`bench run ended ${outcome.kind}`);
      ready = reusable;
    }
    return lat.sort((a, b) => a - b);
  };

  const rows: { label: string; spaced: number[]; b2b: number[]; worker: number[]; local: number[]; localSpaced: number[]; goal: boolean }[] = [];
  for (const c of CASES) {
    const req = request(c);
    const spaced = await samples(RUNS, gapMs, viaRuntime(req));
    const b2b = await samples(RUNS, 0, viaRuntime(req));
    const worker = await samples(RUNS, gapMs, viaRuntime(req, onWorkers));
    const local = await onThisThread(c, 0);
    rows.push({ label: c.label, spaced, b2b, worker, local, localSpaced: await onThisThread(c, gapMs), goal: c.goal });
  }

  const ms = (x: number) => fmt(x, 3).padStart(8);
  out(`\nSentin8:Func module run vs one step commit (${db.driver}, Node ${process.version}, ${RUNS} runs a row${QUICK ? ', quick' : ''})`);
  out(`one step commit alone (commit_transition, 1 KB output, 1 client): p50 ${ms(commitP50)} ms  p99 ${ms(percentile(commits, 99))} ms`);
  out(`runs spaced by ${gapMs} ms (≈ one commit), as in the engine; goal: 1 KB rows p50 ≤ ${GOAL * 100}% of a commit\n`);
  out(`${'case'.padEnd(26)}${'p50 ms'.padStart(9)}${'p99 ms'.padStart(9)}${'% commit'.padStart(10)}${'goal'.padStart(8)}   ${'back-to-back p50'.padStart(16)}   ${'on a worker p50'.padStart(15)}   ${'this thread p50'.padStart(15)}   ${'spaced'.padStart(8)}`);
  for (const r of rows) {
    const p50 = percentile(r.spaced, 50);
    const ratio = p50 / commitP50;
    const verdict = r.goal ? (ratio <= GOAL ? 'met' : 'missed') : '–';
    out(
      `${r.label.padEnd(26)}${ms(p50)} ${ms(percentile(r.spaced, 99))}${`${fmt(100 * ratio, 1)}%`.padStart(10)}${verdict.padStart(8)}   ${ms(percentile(r.b2b, 50))} ms   ${ms(percentile(r.worker, 50))} ms   ${ms(percentile(r.local, 50))} ms   ${ms(percentile(r.localSpaced, 50))} ms`,
    );
  }
  // What bounds the 64 KB rows: Extism 1.0.3 moves input and output 8 bytes per JS host call
  // (input_load_u64 / store_u64), on whichever thread runs the module.
  const local = (i: number) => percentile(rows[i]!.local, 50);
  const perKb = (local(2) - local(0)) / 63;
  out(`\n64 KB: ${fmt(1000 * perKb, 1)} µs per extra KB in+out on this thread (64 KB: ${fmt(local(2), 2)} ms here, ${fmt(percentile(rows[2]!.spaced, 50), 2)} ms via the runtime,`);
  out(`  which sends inputs over 16 KiB to a worker), i.e. 2 × 8,192 host calls of 8 bytes each (Extism 1.0.3's ABI).`);
  // At 1 KB: what a worker adds over the same spaced run on this thread (the hop: waking the
  // sleeping worker and the parent again), what the runtime adds around a run on this thread,
  // and what an idle thread costs over a hot one.
  const spacedHere = (i: number) => percentile(rows[i]!.localSpaced, 50);
  const over = (i: number, k: 'worker' | 'spaced') => fmt(percentile(rows[i]![k], 50) - spacedHere(i), 3);
  out(`1 KB: a worker adds ${over(0, 'worker')} ms (0 calls) / ${over(1, 'worker')} ms (1 call) over the same spaced run on this thread;`);
  out(`  the runtime around a run on this thread adds ${over(0, 'spaced')} / ${over(1, 'spaced')} ms;`);
  out(`  an idle thread costs ${fmt(spacedHere(0) - local(0), 3)} / ${fmt(spacedHere(1) - local(1), 3)} ms over a hot one.`);

  const chain = await inEngine(db, runtime, onWorkers, built.hash['passthrough']!, await built.load(built.hash['passthrough']!));
  const adds = (x: number) => `${ms(x - chain.none)} ms = ${fmt((100 * (x - chain.none)) / commitP50, 1)}% of a commit`;
  out(`\nIn the engine, one workflow alone, a chain of 1 KB passthrough steps: p50 between committed steps`);
  const line = (label: string, x: number, tail = '') => out(`  ${label.padEnd(50)}${ms(x)} ms${x === chain.none ? '' : `  adds ${adds(x)}`}${tail}`);
  line('no module (answered at once)', chain.none);
  line('module run started when the attempt runs', chain.after);
  line('module run started during the commit, on a worker', chain.worker);
  line('module run started during the commit', chain.ahead, `   goal ≤ ${GOAL * 100}%: ${(chain.ahead - chain.none) / commitP50 <= GOAL ? 'met' : 'missed'}`);
} finally {
  await runtime.close();
  await onWorkers.close();
  await built.cleanup();
  await dropSchema(db);
  await db.close();
}
