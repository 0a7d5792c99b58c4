/**
 * Engine throughput against the commit rate Postgres allows, measured in one run on one server
 * (issue "Engine core", Performance). Prints a table; asserts nothing.
 *
 *   npm run bench            (starts a throw-away Postgres 15 unless DATABASE_URL is set)
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import type { LogicVersion, StepDef } from '../contracts/index.ts';
import { callHttp } from '../engine/executors/http-call.ts';
import { onOutcome } from '../engine/core/flow.ts';
import { Engine } from '../engine/runtime/engine.ts';
import { commitTransition } from '../engine/store/commit-transition.ts';
import { loadWorkflow } from '../engine/store/load-workflow.ts';
import { inEnv } from '../engine/store/tx.ts';
import { createFuncRuntime } from '../host-functions/index.ts';
import { buildTestModules, TEST_MEMORY_PAGES } from '../test/host-functions/helpers/test-modules.ts';
import { type Db, openDb } from '../engine/store/db.ts';
import { dropSchema, migrate } from '../engine/store/migrate.ts';
import { makeLogic } from '../test/contracts/helpers.ts';
import { apiStartThroughput } from './api-start.ts';
import { fmt, minimalService, percentile, pool, xactCommits } from './support.ts';

const url = process.env['DATABASE_URL'];
if (!url) throw new Error('set DATABASE_URL (npm run bench starts a Postgres for you)');
const CONCURRENCY = Number(process.env['BENCH_CONCURRENCY'] ?? 16);
const WORKFLOWS = Number(process.env['BENCH_WORKFLOWS'] ?? 1000);
const STEPS = 10;
const out = (s: string) => process.stdout.write(`${s}\n`);

function chain(kind: 'pass' | 'proxy'): LogicVersion {
  const steps: Record<string, StepDef> = {};
  for (let i = 0; i < STEPS; i++) {
    const next = i + 1 < STEPS ? { next: `s${i + 1}` } : {};
    steps[`s${i}`] = kind === 'pass' ? { kind: 'pass', ...next } : { kind: 'proxy', path: '/step', ...next };
  }
  return makeLogic({ logicId: `bench.${kind}`, domain: 'bench', start: 's0', steps });
}

/** The baseline: what node-postgres does with the same shape of transaction at the same concurrency. */
async function rawCommits(total: number): Promise<number> {
  const p = new pg.Pool({ connectionString: url, max: CONCURRENCY });
  await p.query('DROP TABLE IF EXISTS bench_raw_t, bench_raw_log');
  await p.query('CREATE TABLE bench_raw_t (id int PRIMARY KEY, state text, ctx jsonb, v bigint)');
  await p.query('CREATE TABLE bench_raw_log (id int, seq int, payload jsonb, PRIMARY KEY (id, seq))');
  await p.query(`INSERT INTO bench_raw_t SELECT g, 'pending', '{}', 0 FROM generate_series(0, ${CONCURRENCY - 1}) g`);
  const t0 = performance.now();
  await pool(total, CONCURRENCY, async (i) => {
    const c = await p.connect();
    try {
      await c.query('BEGIN');
      await c.query('UPDATE bench_raw_t SET state = $2, ctx = $3, v = v + 1 WHERE id = $1', [i % CONCURRENCY, 'processing', JSON.stringify({ i })]);
      await c.query('INSERT INTO bench_raw_log VALUES ($1, $2, $3)', [i % CONCURRENCY, i, JSON.stringify({ out: 'ok' })]);
      await c.query('COMMIT');
    } finally {
      c.release();
    }
  });
  const rate = total / ((performance.now() - t0) / 1000);
  await p.query('DROP TABLE bench_raw_t, bench_raw_log');
  await p.end();
  return rate;
}

/** HTTP cost alone: the same calls, with the engine's own HTTP client, at the same concurrency. */
async function httpOnly(serviceUrl: string, total: number): Promise<{ rate: number; p50: number }> {
  const lat: number[] = [];
  const t0 = performance.now();
  await pool(total, CONCURRENCY, async () => {
    const s = performance.now();
    await callHttp({ method: 'POST', url: `${serviceUrl}/step`, headers: {}, body: {}, timeoutMs: 10_000 });
    lat.push(performance.now() - s);
  });
  lat.sort((a, b) => a - b);
  return { rate: total / ((performance.now() - t0) / 1000), p50: percentile(lat, 50) };
}

async function freshEngine(serviceUrl: string): Promise<{ db: Db; engine: Engine }> {
  const db = await openDb(url, { schema: `bench_${Date.now()}`, poolSize: CONCURRENCY + 4 });
  await migrate(db);
  const engine = new Engine({
    db,
    executors: { handlers: new Map([['BENCH', { url: serviceUrl }]]) },
    worker: { concurrency: CONCURRENCY, pollMs: 20 },
  });
  return { db, engine };
}

async function throughput(kind: 'pass' | 'proxy', serviceUrl: string) {
  const { db, engine } = await freshEngine(serviceUrl);
  const logic = chain(kind);
  await engine.publish(logic);
  const commits0 = await xactCommits(url!);
  const t0 = performance.now();
  await engine.workers.start();
  const ids: string[] = [];
  await pool(WORKFLOWS, CONCURRENCY, async () => {
    ids.push((await engine.start({ logicId: logic.logicId, input: {} })).id);
  });
  for (;;) {
    const r = await db.pool.query(`SELECT count(*)::int AS n FROM workflows WHERE state = 'completed'`);
    if (r.rows[0].n === WORKFLOWS) break;
    await new Promise((res) => setTimeout(res, 10));
  }
  const seconds = (performance.now() - t0) / 1000;
  await engine.close();
  await dropSchema(db);
  await db.close();
  const commits = (await xactCommits(url!)) - commits0;
  const steps = WORKFLOWS * STEPS;
  return { stepsPerSec: steps / seconds, commitsPerStep: commits / steps, seconds };
}

/** One workflow alone, step after step: the latency the engine adds to each step. */
async function soloLatency(serviceUrl: string) {
  // the HTTP call's own latency when nothing else runs, to subtract from each step
  const alone: number[] = [];
  for (let i = 0; i < 300; i++) {
    const s = performance.now();
    await callHttp({ method: 'POST', url: `${serviceUrl}/step`, headers: {}, body: {}, timeoutMs: 10_000 });
    alone.push(performance.now() - s);
  }
  const httpP50 = percentile(alone.sort((a, b) => a - b), 50);
  const { db, engine } = await freshEngine(serviceUrl);
  const logic = chain('proxy');
  await engine.publish(logic);
  await engine.workers.start();
  const perStep: number[] = [];
  for (let run = 0; run < 30; run++) {
    const { id } = await engine.start({ logicId: logic.logicId, input: {} });
    const r = await engine.settled(id, { pollMs: 1 });
    if (r.state !== 'completed') throw new Error(`solo run ended ${r.state}`);
    const finished = r.steps.map((s) => Date.parse(s.finishedAt!));
    for (let i = 1; i < finished.length; i++) perStep.push(finished[i]! - finished[i - 1]! - httpP50);
  }
  await engine.close();
  await dropSchema(db);
  await db.close();
  perStep.sort((a, b) => a - b);
  return { p50: percentile(perStep, 50), p99: percentile(perStep, 99), httpP50 };
}

/**
 * What a func step adds: the module run (echo, 0 or 1 recorded host call, 1 KB / 64 KB) measured
 * against the cost of one step commit (one-client commit_transition latency) in the same run.
 * Runs are spaced by one commit's time, as steps are in the engine: that is when a worker makes
 * the next instance of the module ahead of its run.
 */
async function funcOverhead(serviceUrl: string) {
  const built = await buildTestModules(['passthrough', 'one-call']);
  const runtime = createFuncRuntime({ loadModule: built.load, maxMemoryPages: TEST_MEMORY_PAGES });
  const { db, engine } = await freshEngine(serviceUrl);
  const logic = chain('proxy');
  await engine.publish(logic);
  // one step's commit alone: finish an attempt and prepare the next through commit_transition
  const commit: number[] = [];
  for (let w = 0; w < 30; w++) {
    const { id } = await engine.start({ logicId: logic.logicId, input: {} });
    const token = randomUUID();
    await db.pool.query(`UPDATE workflows SET state = 'processing', lease_token = $2, row_version = row_version + 1 WHERE id = $1`, [id, token]);
    let current = (await inEnv(db, 'default', (c) => loadWorkflow(c, id)))!;
    while (current.instance.state === 'processing') {
      const t = await onOutcome(logic, current.instance, { status: 'succeeded', output: { ok: true } });
      const s0 = performance.now();
      await commitTransition(db, current, t, { keepLease: { token, ttlMs: 30_000 } });
      commit.push(performance.now() - s0);
      current = { instance: t.instance, rowVersion: current.rowVersion + 1, leaseToken: token, wakes: [] };
    }
  }
  await dropSchema(db);
  await db.close();
  const commitP50 = percentile(commit.sort((a, b) => a - b), 50);
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

const service = await minimalService();
out(`engine bench: ${WORKFLOWS} concurrent workflows × ${STEPS} steps, concurrency ${CONCURRENCY}, Postgres ${url.replace(/\/\/.*@/, '//…@')}`);
const raw = await rawCommits(WORKFLOWS * 5);
const http = await httpOnly(service.url, WORKFLOWS * 5);
const passRun = await throughput('pass', service.url);
const proxyRun = await throughput('proxy', service.url);
const solo = await soloLatency(service.url);
const func = await funcOverhead(service.url);
const starts = await (async () => {
  const { db, engine } = await freshEngine(service.url);
  const logic = chain('pass');
  await engine.publish(logic);
  const r = await apiStartThroughput(engine, logic, WORKFLOWS * 2, CONCURRENCY);
  await engine.close();
  await dropSchema(db);
  await db.close();
  return r;
})();
await service.close();

out('');
out(`raw node-postgres UPDATE+INSERT transactions   ${fmt(raw)} tx/s`);
out(`minimal HTTP service alone                      ${fmt(http.rate)} calls/s  (p50 ${fmt(http.p50, 2)} ms)`);
out(`engine, pass steps (folded into one commit)     ${fmt(passRun.stepsPerSec)} steps/s  ${fmt(passRun.commitsPerStep, 2)} commits/step`);
out(`engine, proxy steps (one commit each)           ${fmt(proxyRun.stepsPerSec)} steps/s  ${fmt(proxyRun.commitsPerStep, 2)} commits/step`);
out(`ratio engine(proxy)/raw                         ${fmt(proxyRun.stepsPerSec / raw, 2)}`);
out(`ratio engine(proxy)/raw, HTTP cost removed      ${fmt(1 / (1 / proxyRun.stepsPerSec - 1 / http.rate) / raw, 2)}`);
out(`added latency per step, one workflow alone      p50 ${fmt(solo.p50, 2)} ms   p99 ${fmt(solo.p99, 2)} ms  (HTTP alone p50 ${fmt(solo.httpP50, 2)} ms subtracted)`);
out('');
out(`one step commit alone (commit_transition, p50)  ${fmt(func.commitP50, 3)} ms`);
for (const r of func.rows) {
  out(`func step module run, ${r.label.padEnd(24)} ${fmt(r.p50, 3)} ms  = ${fmt((100 * r.p50) / func.commitP50, 0)}% of a commit`);
}
out('');
out(`starts in process (engine.start), ${CONCURRENCY} callers  ${fmt(starts.local)} starts/s  (before ${fmt(starts.before)}, after ${fmt(starts.after)})`);
out(`API start throughput, ${CONCURRENCY} HTTP clients         ${fmt(starts.http)} starts/s  = ${fmt(starts.ratio, 2)} of in process`);
