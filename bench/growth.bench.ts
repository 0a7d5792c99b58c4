/**
 * Is the cost of a step flat as work grows? (docs/performance.md: step 200 within 1.2× of step 1, claim and commit at 1M within 1.2× of empty). Three cases,
 * each printing its goal and met/missed with the numbers; asserts nothing.
 *
 *   1. A workflow of 200 steps, each output 4 KB: step 191–200 against step 1–10, in time and in
 *      bytes written per commit (WAL and the commit statement's parameter).
 *   2. 100k (and 1M, full mode) rows in `workflows` / `step_runs`: claim and commit latency
 *      against the same schema empty.
 *   3. 1, 2 and 4 engine processes (`s8flow start --no-api`) on one Postgres: throughput of the
 *      same batch of proxy workflows.
 *
 *   npm run bench:growth [-- --quick]   (starts a throw-away Postgres 15 unless DATABASE_URL is set)
 *
 * Cases 1 and 2 drive the store and the core directly, one client at a time, exactly as a worker
 * does after its HTTP call (claim → begin → apply(outcome) → commit_journaled with the lease kept),
 * so the numbers are the commit path's alone, free of HTTP and scheduling noise.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import type { LogicVersion, StepDef } from '../contracts/index.ts';
import { beginClaimed, isUnstarted } from '../engine/core/flow.ts';
import { apply } from '../engine/core/journal.ts';
import { Engine } from '../engine/runtime/engine.ts';
import { claimWorkflows } from '../engine/store/claim-workflows.ts';
import { commitTransition, effectsParam } from '../engine/store/commit-transition.ts';
import { type Db, openDb } from '../engine/store/db.ts';
import { dropSchema, migrate } from '../engine/store/migrate.ts';
import { type Stored, storedCtx } from '../engine/store/rows.ts';
import { makeLogic } from '../test/contracts/helpers.ts';
import { cloneInstances } from '../test/support/bulk-instances.ts';
import { killAll, WorkerProcess } from '../test/support/worker-process.ts';
import { cpuOf, postgresCpu } from './process-cpu.ts';
import { fmt, minimalService, percentile, pool, reportGoal, verdict, xactCommits } from './support.ts';

const url = process.env['DATABASE_URL'];
if (!url) throw new Error('set DATABASE_URL (npm run bench:growth starts a Postgres for you)');
const QUICK = process.argv.includes('--quick');
const ENV = 'default';
const LEASE_MS = 30_000;
/** The worker processes poll at `s8flow start`'s default: new work wakes them by NOTIFY. */
const POLL_MS = 250;
const WARMUP_PER_PROCESS = 40;
const out = (s: string) => process.stdout.write(`${s}\n`);
const metOrMissed = (ok: boolean) => (ok ? 'met' : 'MISSED');
const median = (xs: number[]) => percentile([...xs].sort((a, b) => a - b), 50);

function chain(logicId: string, steps: number, extra: Partial<LogicVersion> = {}): LogicVersion {
  const defs: Record<string, StepDef> = {};
  for (let i = 0; i < steps; i++) defs[`s${i}`] = { kind: 'proxy', path: '/step', ...(i + 1 < steps ? { next: `s${i + 1}` } : {}) };
  return makeLogic({ logicId, start: 's0', steps: defs, ...extra });
}

async function freshDb(tag: string): Promise<Db> {
  const db = await openDb(url, { schema: `bench_growth_${tag}_${Date.now()}`, poolSize: 8 });
  await migrate(db);
  return db;
}

/** Where the WAL insert position is now (bytes). Reading it writes nothing. */
async function walLsn(c: pg.Client): Promise<bigint> {
  const r = await c.query<{ b: string }>(`SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::text AS b`);
  return BigInt(r.rows[0]!.b);
}

interface StepCost {
  /** the core deciding the step's outcome (apply), ms */
  coreMs: number;
  /** the commit round trip, ms */
  commitMs: number;
  /** WAL written by the commit, bytes (null when not measured) */
  walBytes: number | null;
  /** the commit statement's parameter, bytes */
  paramBytes: number;
  /** of which the instance's context (ctx), bytes */
  ctxBytes: number;
}

/**
 * Claims one runnable instance and drives it to its end as a worker would, every step succeeding
 * with `output(i)`. `wal`: a separate connection that reads the WAL position around each commit.
 * Returns the claim's latency and each step's cost (the begin commit excluded).
 */
async function driveOne(db: Db, logic: LogicVersion, output: (i: number) => unknown, wal: pg.Client | null) {
  const c0 = performance.now();
  const [claimed] = await claimWorkflows(db.pool, { limit: 1, leaseMs: LEASE_MS });
  const claimMs = performance.now() - c0;
  if (claimed === undefined) throw new Error('nothing to claim');
  const token = claimed.leaseToken!;
  const keepLease = { token, ttlMs: LEASE_MS };
  let stored: Stored = claimed;
  if (isUnstarted(stored.instance)) {
    const t = await beginClaimed(logic, stored.instance, true);
    const keep = t.instance.state === 'processing' ? keepLease : null;
    if (!(await commitTransition(db, stored, t, { keepLease: keep, by: token, event: { type: 'begin', claimed: true } }))) throw new Error('begin fenced');
    stored = { instance: t.instance, rowVersion: stored.rowVersion + 1, leaseToken: token, wakes: [] };
  }
  const steps: StepCost[] = [];
  for (let i = 0; stored.instance.state === 'processing'; i++) {
    const event = { type: 'outcome', outcome: { status: 'succeeded', output: output(i) } } as const;
    const k0 = performance.now();
    const t = (await apply(logic, stored.instance, event, true))!;
    const coreMs = performance.now() - k0;
    // what the commit sends: the row's ctx (outputs are rows of their own, migration 0011) and the effects with the changed outputs
    const ctxBytes = Buffer.byteLength(JSON.stringify(storedCtx(t.instance.ctx)));
    const paramBytes = ctxBytes + Buffer.byteLength(JSON.stringify({ effects: effectsParam(t, stored.instance.ctx.outputs), event }));
    const w0 = wal ? await walLsn(wal) : 0n;
    const s0 = performance.now();
    const keep = t.instance.state === 'processing';
    if (!(await commitTransition(db, stored, t, { keepLease: keep ? keepLease : null, by: token, event }))) throw new Error('commit fenced');
    const commitMs = performance.now() - s0;
    const walBytes = wal ? Number((await walLsn(wal)) - w0) : null;
    steps.push({ coreMs, commitMs, walBytes, paramBytes, ctxBytes });
    stored = { instance: t.instance, rowVersion: stored.rowVersion + 1, leaseToken: token, wakes: [] };
  }
  return { claimMs, steps };
}

/** Case 1: 200 steps of 4 KB outputs; does step 200 cost what step 1 does? */
async function longWorkflow() {
  const STEPS = 200;
  const RUNS = QUICK ? 2 : 5;
  const db = await freshDb('long');
  const engine = new Engine({ db });
  const logic = chain('bench.long', STEPS);
  await engine.publish(logic);
  const wal = new pg.Client({ connectionString: url });
  await wal.connect();
  // 4 KB of base64 noise per output: TOAST compresses repeated characters to nothing, real outputs do not
  const output = () => ({ data: randomBytes(3072).toString('base64') });
  const per: StepCost[][] = Array.from({ length: STEPS }, () => []);
  for (let r = 0; r < RUNS; r++) {
    await engine.start({ logicId: logic.logicId, input: {} });
    const { steps } = await driveOne(db, logic, output, wal);
    for (const [i, s] of steps.entries()) per[i]!.push(s);
  }
  await wal.end();
  await engine.close();
  await dropSchema(db);
  await db.close();
  const window = (from: number, to: number) => {
    const all = per.slice(from, to).flat();
    return {
      coreMs: median(all.map((s) => s.coreMs)),
      commitMs: median(all.map((s) => s.commitMs)),
      walBytes: median(all.map((s) => s.walBytes!)),
      paramBytes: median(all.map((s) => s.paramBytes)),
      ctxBytes: median(all.map((s) => s.ctxBytes)),
    };
  };
  const first = window(0, 10);
  const last = window(STEPS - 10, STEPS);
  const totalWal = per.reduce((sum, s) => sum + median(s.map((x) => x.walBytes!)), 0);
  return { STEPS, RUNS, first, last, totalWal };
}

/**
 * Case 2: claim and commit latency in a schema holding 100k (and 1M) instances, against a schema
 * holding only the measured batches, measured in alternating rounds so a load that drifts during
 * the run (the machine is shared) falls on both alike.
 */
async function bigTables() {
  const SIZES = process.env['BENCH_GROWTH_SIZES']?.split(',').map(Number) ?? (QUICK ? [100_000] : [100_000, 1_000_000]);
  const BATCH = QUICK ? 40 : 80;
  const ROUNDS = QUICK ? 3 : 5;
  const logic = chain('bench.rows', 3);
  const parked = makeLogic({ logicId: 'bench.parked', start: 'approve', steps: { approve: { kind: 'decision', options: ['go'], deadline: 'P7D' } } });
  const open = async (tag: string) => {
    const db = await freshDb(tag);
    const engine = new Engine({ db });
    await engine.publish(logic);
    await engine.publish(parked);
    return { db, engine };
  };
  const empty = await open('empty');
  const big = await open('big');
  const measure = async ({ db, engine }: { db: Db; engine: Engine }) => {
    await pool(BATCH, 8, async () => {
      await engine.start({ logicId: logic.logicId, input: {} });
    });
    const claims: number[] = [];
    const commits: number[] = [];
    for (let i = 0; i < BATCH; i++) {
      const r = await driveOne(db, logic, () => ({ ok: true }), null);
      claims.push(r.claimMs);
      for (const s of r.steps) commits.push(s.commitMs);
    }
    return { claims, commits };
  };
  const counts = async (db: Db) => {
    const r = await db.pool.query<{ w: number; s: number }>('SELECT (SELECT count(*) FROM workflows)::int AS w, (SELECT count(*) FROM step_runs)::int AS s');
    return { workflows: r.rows[0]!.w, stepRuns: r.rows[0]!.s };
  };
  await measure(empty); // warm-up: JIT, plans, the pool's connections
  // the template instances: one completed 3-step run, one parked on a decision (with its deadline timer)
  const done = (await big.engine.start({ logicId: logic.logicId, input: {} })).id;
  await driveOne(big.db, logic, () => ({ ok: true }), null);
  const waiting = (await big.engine.start({ logicId: parked.logicId, input: {} })).id;
  // a decision first parks at start; claim it only if the engine left it runnable
  const state = (await big.db.pool.query<{ state: string }>('SELECT state FROM workflows WHERE id = $1', [waiting])).rows[0]!.state;
  if (state === 'pending') await driveOne(big.db, parked, () => ({ ok: true }), null);
  const rows: { size: number; workflows: number; stepRuns: number; fillS: number; claim: [number, number]; commit: [number, number] }[] = [];
  let have = (await counts(big.db)).workflows;
  for (const size of SIZES) {
    const f0 = performance.now();
    const add = size - have;
    // nine in ten finished, one in ten parked: history piles up, and some of it waits
    await cloneInstances(big.db, [done], Math.round(add * 0.9));
    await cloneInstances(big.db, [waiting], add - Math.round(add * 0.9));
    await big.db.pool.query('VACUUM ANALYZE workflows, step_runs, timers');
    const fillS = (performance.now() - f0) / 1000;
    have = size;
    const e = { claims: [] as number[], commits: [] as number[] };
    const b = { claims: [] as number[], commits: [] as number[] };
    for (let round = 0; round < ROUNDS; round++) {
      for (const [into, side] of round % 2 === 0 ? ([[e, empty], [b, big]] as const) : ([[b, big], [e, empty]] as const)) {
        const m = await measure(side);
        into.claims.push(...m.claims);
        into.commits.push(...m.commits);
      }
    }
    rows.push({ size, ...(await counts(big.db)), fillS, claim: [median(e.claims), median(b.claims)], commit: [median(e.commits), median(b.commits)] });
  }
  for (const { db, engine } of [empty, big]) {
    await engine.close();
    await dropSchema(db);
    await db.close();
  }
  return { BATCH, ROUNDS, rows };
}

/** Steps/s of `workflows` proxy workflows, started once `processes` engine processes are ready and warm, until all are done. */
/** One run of process scaling: steps/s, commits a step, and CPU µs a step of the engine processes, Postgres and this process (the bench's starts and the service). */
interface ScalingRun {
  rate: number;
  commitsPerStep: number;
  enginesUs: number;
  postgresUs: number;
  benchUs: number;
}

async function throughputWith(processes: number, serviceUrl: string, workflows: number, steps: number, concurrency: number): Promise<ScalingRun> {
  const db = await freshDb(`procs${processes}`);
  const engine = new Engine({ db, env: ENV });
  const logic = chain('bench.procs', steps);
  await engine.publish(logic, ENV);
  const workers: WorkerProcess[] = [];
  try {
    for (let p = 0; p < processes; p++) {
      workers.push(await WorkerProcess.start({ databaseUrl: url!, schema: db.schema, env: ENV, handlerUrl: serviceUrl, concurrency, leaseMs: LEASE_MS, pollMs: POLL_MS }));
    }
    const batch = async (n: number) => {
      await pool(n, concurrency, async () => {
        await engine.start({ logicId: logic.logicId, input: {}, env: ENV });
      });
      for (;;) {
        const r = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM workflows WHERE state <> 'completed'`);
        if (r.rows[0]!.n === 0) break;
        await new Promise((res) => setTimeout(res, 50));
      }
    };
    // a fresh process runs cold (lazy imports, JIT) for its first few hundred steps: warm them all
    await batch(WARMUP_PER_PROCESS * processes);
    const commits0 = await xactCommits(url!);
    const pids = workers.map((w) => w.pid);
    const cpu0 = { engines: cpuOf(pids), postgres: postgresCpu(), bench: process.cpuUsage() };
    const t0 = performance.now();
    await batch(workflows);
    const rate = (workflows * steps) / ((performance.now() - t0) / 1000);
    const perStep = (seconds: number) => (seconds * 1e6) / (workflows * steps);
    const bench = process.cpuUsage(cpu0.bench);
    return {
      rate,
      // every commit of the database over the run, the idle workers' polls included
      commitsPerStep: ((await xactCommits(url!)) - commits0) / (workflows * steps),
      enginesUs: perStep(cpuOf(pids) - cpu0.engines),
      postgresUs: perStep(postgresCpu() - cpu0.postgres),
      benchUs: perStep((bench.user + bench.system) / 1e6),
    };
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
    await killAll(workers);
    await engine.close();
    await dropSchema(db);
    await db.close();
  }
}

/** Case 3: the same batch of proxy workflows through 1, 2 and 4 engine processes on one Postgres. */
async function processScaling() {
  const WORKFLOWS = QUICK ? 200 : 600;
  const STEPS = 10;
  const CONCURRENCY = 16;
  const service = await minimalService();
  const ROUNDS = QUICK ? 1 : 3;
  // each process at CONCURRENCY (the goal's case), and CONCURRENCY in all, split between them
  // (the same work in flight: what adding processes costs apart from adding concurrency)
  const key = (processes: number, split: boolean) => `${processes}${split ? ' split' : ''}`;
  const runs = new Map<string, ScalingRun[]>();
  for (let round = 0; round < ROUNDS; round++) {
    // alternate the order, so a load that drifts during the run does not favour one count
    for (const processes of round % 2 === 0 ? [1, 2, 4] : [4, 2, 1]) {
      for (const split of processes === 1 ? [false] : [false, true]) {
        const r = await throughputWith(processes, service.url, WORKFLOWS, STEPS, split ? CONCURRENCY / processes : CONCURRENCY);
        runs.set(key(processes, split), [...(runs.get(key(processes, split)) ?? []), r]);
      }
    }
  }
  const row = (processes: number, split: boolean) => {
    const rs = runs.get(key(processes, split))!;
    const m = (k: keyof ScalingRun) => median(rs.map((x) => x[k]));
    return { processes, stepsPerSec: m('rate'), commitsPerStep: m('commitsPerStep'), enginesUs: m('enginesUs'), postgresUs: m('postgresUs'), benchUs: m('benchUs') };
  };
  const rows = [1, 2, 4].map((p) => row(p, false));
  const split = [1, 2, 4].map((p) => row(p, p !== 1));
  await service.close();
  return { WORKFLOWS, STEPS, CONCURRENCY, ROUNDS, rows, split };
}

const only = process.env['BENCH_GROWTH_CASES']?.split(',') ?? ['long', 'rows', 'procs'];
out(`growth bench${QUICK ? ' (quick)' : ''}: Postgres ${url.replace(/\/\/.*@/, '//…@')}`);

if (only.includes('long')) {
  const r = await longWorkflow();
  const ratio = r.last.commitMs / r.first.commitMs;
  out('');
  out(`1. one workflow of ${r.STEPS} steps, each output 4 KB (median of ${r.RUNS} runs; steps 1–10 against ${r.STEPS - 9}–${r.STEPS})`);
  out('| | steps 1–10 | steps 191–200 | ratio |');
  out('|---|---:|---:|---:|');
  out(`| commit (ms) | ${fmt(r.first.commitMs, 2)} | ${fmt(r.last.commitMs, 2)} | ${fmt(ratio, 2)} |`);
  out(`| core: apply(outcome) (ms) | ${fmt(r.first.coreMs, 3)} | ${fmt(r.last.coreMs, 3)} | ${fmt(r.last.coreMs / r.first.coreMs, 2)} |`);
  out(`| WAL per commit (bytes) | ${fmt(r.first.walBytes)} | ${fmt(r.last.walBytes)} | ${fmt(r.last.walBytes / r.first.walBytes, 1)} |`);
  out(`| commit parameter (ctx + rows + outputs + event, bytes) | ${fmt(r.first.paramBytes)} | ${fmt(r.last.paramBytes)} | ${fmt(r.last.paramBytes / r.first.paramBytes, 1)} |`);
  out(`| of which ctx (bytes) | ${fmt(r.first.ctxBytes)} | ${fmt(r.last.ctxBytes)} | ${fmt(r.last.ctxBytes / r.first.ctxBytes, 1)} |`);
  const flat = 200 * 3 * 4096; // each output written once in step_runs, once in the journal, once in workflow_outputs
  out(`WAL for the whole workflow: ${fmt(r.totalWal / 1e6, 1)} MB for ${fmt((r.STEPS * 4096) / 1e6, 1)} MB of outputs (${fmt(r.totalWal / flat, 1)}× what writing each output 3 times once would take)`);
  out(`goal: step 200 within 1.2× of step 1 (commit) — ${metOrMissed(ratio <= 1.2)} (${fmt(ratio, 2)}×); the context is rewritten on every step: ${r.last.paramBytes > 4 * r.first.paramBytes ? 'yes, O(n²) bytes' : 'no'}`);
  reportGoal({
    case: `growth: steps ${r.STEPS - 9}–${r.STEPS} of a ${r.STEPS}-step workflow, 4 KB outputs`,
    clients: '1',
    result: `commit ${fmt(r.first.commitMs, 2)} → ${fmt(r.last.commitMs, 2)} ms`,
    vs: `${fmt(ratio, 2)}× of steps 1–10; WAL a commit ${fmt(r.last.walBytes / r.first.walBytes, 2)}×`,
    goal: verdict('≤ 1.2× of step 1', ratio <= 1.2, `${fmt(ratio, 2)}×`),
  });
}

if (only.includes('rows')) {
  const r = await bigTables();
  out('');
  out(`2. claim and commit latency (one client, median of ${r.ROUNDS} alternating rounds of ${r.BATCH} claims, 3 commits each): an almost empty schema against one holding many instances`);
  out('| workflows | step_runs | claim empty (ms) | claim full (ms) | ratio | commit empty (ms) | commit full (ms) | ratio | fill (s) |');
  out('|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const x of r.rows) {
    out(`| ${fmt(x.workflows)} | ${fmt(x.stepRuns)} | ${fmt(x.claim[0], 2)} | ${fmt(x.claim[1], 2)} | ${fmt(x.claim[1] / x.claim[0], 2)} | ${fmt(x.commit[0], 2)} | ${fmt(x.commit[1], 2)} | ${fmt(x.commit[1] / x.commit[0], 2)} | ${fmt(x.fillS, 0)} |`);
  }
  for (const x of r.rows) {
    const claim = x.claim[1] / x.claim[0];
    const commit = x.commit[1] / x.commit[0];
    out(`goal: claim and commit at ${fmt(x.size)} instances within 1.2× of empty — ${metOrMissed(Math.max(claim, commit) <= 1.2)} (claim ${fmt(claim, 2)}×, commit ${fmt(commit, 2)}×)`);
    reportGoal({
      case: `growth: claim and commit at ${fmt(x.size)} instances`,
      clients: '1',
      result: `claim ${fmt(x.claim[1], 2)} ms, commit ${fmt(x.commit[1], 2)} ms`,
      vs: `claim ${fmt(claim, 2)}×, commit ${fmt(commit, 2)}× of an empty schema`,
      goal: verdict('≤ 1.2× of empty', Math.max(claim, commit) <= 1.2, `${fmt(Math.max(claim, commit), 2)}×`),
    });
  }
}

if (only.includes('procs')) {
  const r = await processScaling();
  out('');
  out(`3. ${r.WORKFLOWS} workflows × ${r.STEPS} proxy steps through N engine processes (concurrency ${r.CONCURRENCY} each, poll ${POLL_MS} ms), one Postgres, median of ${r.ROUNDS} rounds`);
  out('| processes | steps/s | ratio to 1 | commits/step | CPU µs/step: engines | Postgres | bench + service |');
  out('|---:|---:|---:|---:|---:|---:|---:|');
  const cpu = (x: (typeof r.rows)[number]) => `${fmt(x.enginesUs)} | ${fmt(x.postgresUs)} | ${fmt(x.benchUs)}`;
  const one = r.rows[0]!.stepsPerSec;
  for (const x of r.rows) out(`| ${x.processes} | ${fmt(x.stepsPerSec)} | ${fmt(x.stepsPerSec / one, 2)} | ${fmt(x.commitsPerStep, 2)} | ${cpu(x)} |`);
  const drops = r.rows.some((x, i) => i > 0 && x.stepsPerSec < r.rows[i - 1]!.stepsPerSec);
  out(`goal: throughput never drops as processes are added — ${metOrMissed(!drops)} (${r.rows.map((x) => fmt(x.stepsPerSec)).join(' → ')} steps/s)`);
  reportGoal({
    case: `growth: ${r.rows.map((x) => x.processes).join(' / ')} engine processes, proxy steps`,
    clients: `${r.CONCURRENCY} each`,
    result: `${r.rows.map((x) => fmt(x.stepsPerSec)).join(' / ')} steps/s`,
    vs: `${r.rows.map((x) => fmt(x.stepsPerSec / one, 2)).join(' / ')} of one process`,
    goal: verdict('never drops as processes are added', !drops, r.rows.map((x) => fmt(x.stepsPerSec)).join(' → ')),
  });
  out('');
  out(`the same work with ${r.CONCURRENCY} in flight in all, split between the processes (${r.split.map((x) => `${x.processes} × ${r.CONCURRENCY / x.processes}`).join(', ')}): no goal; it tells adding processes apart from adding concurrency`);
  out('| processes | steps/s | ratio to 1 | commits/step | CPU µs/step: engines | Postgres | bench + service |');
  out('|---:|---:|---:|---:|---:|---:|---:|');
  for (const x of r.split) out(`| ${x.processes} | ${fmt(x.stepsPerSec)} | ${fmt(x.stepsPerSec / r.split[0]!.stepsPerSec, 2)} | ${fmt(x.commitsPerStep, 2)} | ${cpu(x)} |`);
}
