import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import { engineOptionsFrom, loadConfig } from '../../engine/config.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import type { TimeoutCaps } from '../../engine/runtime/execute-attempt.ts';
import type { Db } from '../../engine/store/db.ts';
import { createFuncRuntime, type FuncRunResult, type FuncRuntime } from '../../host-functions/index.ts';
import { begin } from '../../engine/core/flow.ts';
import { newInstance } from '../../engine/runtime/start-instance.ts';
import { claimWorkflows } from '../../engine/store/claim-workflows.ts';
import { insertWorkflow } from '../../engine/store/insert-workflow.ts';
import { publishLogicVersion } from '../../engine/store/logic-versions.ts';
import { asScheduler, inEnv } from '../../engine/store/tx.ts';
import { describeEachDriver } from '../support/db.ts';
import { FakeService, gatedService } from '../support/fake-service.ts';
import { waitFor } from '../support/store-checks.ts';
import { OPERATOR, settle, uniqueLogic } from '../support/engine.ts';
import { type BuiltTestModules, buildTestModules, runRequest, TEST_MEMORY_PAGES } from '../host-functions/helpers/test-modules.ts';

/**
 * No tenant stalls another through the module runtime: a module that never returns holds no
 * worker past its timeout (counted from when it was queued), gives way when its run is aborted,
 * and never keeps another env's run from a worker.
 */

let modules: BuiltTestModules;
beforeAll(async () => {
  modules = await buildTestModules(['misbehave', 'echo']);
}, 120_000);
afterAll(async () => {
  await modules?.cleanup();
});

const FOREVER = 2_147_483_647;
const spin = (queue: string, signal?: AbortSignal, timeoutMs = FOREVER) =>
  runRequest(modules.hash['misbehave']!, { exportName: 'loop', input: 'x', timeoutMs, queue, ...(signal ? { signal } : {}) });
const echo = (queue: string, input: unknown, timeoutMs = 60_000) => runRequest(modules.hash['echo']!, { input, timeoutMs, queue });

/** Settles to whether `p` had resolved by the time `other` did. */
async function settledFirst(other: Promise<unknown>, p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(() => (done = true));
  await other;
  return done;
}

describe('the module runtime under a spinning tenant', () => {
  it("a run's timeout counts from when it was queued: one queued behind a spinner of its env fails FUNC_TIMEOUT", async () => {
    const runtime = createFuncRuntime({ loadModule: modules.load, maxMemoryPages: TEST_MEMORY_PAGES, poolSize: 1, runInline: false });
    try {
      const stop = new AbortController();
      const spinner = runtime.run(spin('a', stop.signal));
      const queued = await runtime.run(echo('a', 1, 300));
      expect(queued).toMatchObject({ status: 'failed', error: { code: 'FUNC_TIMEOUT' } });
      stop.abort();
      await spinner;
    } finally {
      await runtime.close();
    }
  });

  it("another env's run completes while two spinners of one env run", async () => {
    const runtime = createFuncRuntime({ loadModule: modules.load, maxMemoryPages: TEST_MEMORY_PAGES, poolSize: 2, runInline: false });
    try {
      const stop = new AbortController();
      const spinners = Promise.all([runtime.run(spin('a', stop.signal)), runtime.run(spin('a', stop.signal))]);
      const other = runtime.run(echo('b', 'b'));
      // the spinners never end on their own: the other env's run must come first
      expect(await settledFirst(other, spinners)).toBe(false);
      expect(await other).toEqual({ status: 'done', output: { echo: 'b' }, calls: 0 });
      stop.abort();
      await spinners;
    } finally {
      await runtime.close();
    }
  });

  it('aborting a run in flight stops its worker (FUNC_ABORTED) and a replacement serves the next runs', async () => {
    const runtime = createFuncRuntime({ loadModule: modules.load, maxMemoryPages: TEST_MEMORY_PAGES, poolSize: 1, runInline: false });
    try {
      const stop = new AbortController();
      const spinner = runtime.run(spin('a', stop.signal));
      const queued = new AbortController();
      const waiting = runtime.run({ ...echo('a', 0), signal: queued.signal });
      queued.abort();
      expect(await waiting).toMatchObject({ status: 'failed', error: { code: 'FUNC_ABORTED' } });
      stop.abort();
      const result: FuncRunResult = await spinner;
      expect(result).toMatchObject({ status: 'failed', error: { code: 'FUNC_ABORTED' } });
      const after = await Promise.all([1, 2].map((i) => runtime.run(echo('a', i))));
      expect(after).toEqual([1, 2].map((i) => ({ status: 'done', output: { echo: i }, calls: 0 })));
    } finally {
      await runtime.close();
    }
  });

  it('close() returns while a spinner runs, and the spinner ends FUNC_RUNTIME_CLOSED', async () => {
    const runtime = createFuncRuntime({ loadModule: modules.load, maxMemoryPages: TEST_MEMORY_PAGES, poolSize: 1, runInline: false });
    const spinner = runtime.run(spin('a'));
    await runtime.run(echo('b', 0)).catch(() => {});
    await runtime.close();
    expect(await spinner).toMatchObject({ status: 'failed', error: { code: 'FUNC_RUNTIME_CLOSED' } });
  });
});

describeEachDriver('the engine under a spinning tenant', (getDb) => {
  let runtime: FuncRuntime;
  let engine: Engine | null = null;
  const UNCAPPED: TimeoutCaps = { stepMs: FOREVER, funcMs: FOREVER };

  beforeAll(() => {
    runtime = createFuncRuntime({ loadModule: modules.load, maxMemoryPages: TEST_MEMORY_PAGES, poolSize: 2, runInline: false });
  });
  afterEach(async () => {
    await engine?.close();
    engine = null;
  });
  afterAll(async () => {
    await runtime?.close();
  });

  function makeEngine(db: Db, timeoutCaps: TimeoutCaps): Engine {
    engine = new Engine({ db, env: 'team-a', executors: { funcRuntime: runtime }, worker: { timeoutCaps, pollMs: 20 } });
    return engine;
  }

  const spinner = () =>
    uniqueLogic({
      start: 'spin',
      modules: { bad: { sha256: modules.hash['misbehave']!, imports: {} } },
      steps: { spin: { kind: 'func', module: 'bad', export: 'loop', timeoutMs: FOREVER, retry: { maxAttempts: 1 } } },
    });
  const echoer = () =>
    uniqueLogic({
      start: 'echo',
      modules: { ok: { sha256: modules.hash['echo']!, imports: {} } },
      // long enough for a worker replaced after a cancel to compile the module on a loaded box
      // (1 s failed in CI at load 10); a run that never gets a worker still fails FUNC_TIMEOUT
      steps: { echo: { kind: 'func', module: 'ok', timeoutMs: 15_000, retry: { maxAttempts: 1 } } },
    });

  async function publish(e: Engine, env: string, logic: LogicVersion): Promise<void> {
    const uploads = await Promise.all(Object.values(logic.modules ?? {}).map(async (m) => [m.sha256, await modules.load(m.sha256)] as const));
    await e.publishVersion(env, logic, Object.fromEntries(uploads));
  }

  async function until(what: string, check: () => Promise<boolean>): Promise<void> {
    for (let i = 0; i < 2_000; i++) {
      if (await check()) return;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    throw new Error(`never: ${what}`);
  }

  it('a module with timeoutMs 2147483647 that never returns fails FUNC_TIMEOUT at the configured cap', async () => {
    const e = makeEngine(getDb(), { stepMs: FOREVER, funcMs: 300 });
    const logic = spinner();
    await publish(e, 'team-a', logic);
    const { id } = await e.start({ logicId: logic.logicId, input: {} });
    await settle(e);
    expect(await e.get(id)).toMatchObject({ state: 'failed', error: { code: 'FUNC_TIMEOUT', step: 'spin' } });
  });

  it("another env's func step completes while two spinners of one env run, and cancelling them frees their workers", async () => {
    const e = makeEngine(getDb(), UNCAPPED);
    const spin = spinner();
    const quick = echoer();
    await publish(e, 'team-a', spin);
    await publish(e, 'team-a', quick);
    await publish(e, 'team-b', quick);
    await e.workers.start();
    const spinners = [await e.start({ logicId: spin.logicId, input: {} }), await e.start({ logicId: spin.logicId, input: {} })];
    await until('both spinners run', async () => (await Promise.all(spinners.map((s) => e.get(s.id)))).every((r) => r.state === 'processing'));
    const other = await e.start({ logicId: quick.logicId, input: { n: 1 }, env: 'team-b' });
    expect(await e.settled(other.id, 'team-b')).toMatchObject({ state: 'completed', output: { echo: { n: 1 } } });
    for (const s of spinners) expect((await e.get(s.id)).state).toBe('processing');

    for (const s of spinners) await e.ops.cancel(s.id, { reason: 'spins' }, { ...OPERATOR, env: 'team-a' });
    for (const s of spinners) expect((await e.settled(s.id)).state).toBe('cancelled');
    // both of team-a's workers were spinning: its next run gets one only if cancel stopped them
    const next = await e.start({ logicId: quick.logicId, input: { n: 2 } });
    expect(await e.settled(next.id)).toMatchObject({ state: 'completed', output: { echo: { n: 2 } } });
  });

  it('stopping the engine returns while a module spins, and lets its instance go at once', async () => {
    const e = makeEngine(getDb(), UNCAPPED);
    const spin = spinner();
    await publish(e, 'team-a', spin);
    await e.workers.start();
    const { id } = await e.start({ logicId: spin.logicId, input: {} });
    await until('the spinner runs', async () => (await e.get(id)).state === 'processing');
    await e.workers.stop();
    const row = await getDb().pool.query<{ lapsed: boolean }>(`SELECT lease_expires_at <= now() AS lapsed FROM workflows WHERE id = $1`, [id]);
    expect(row.rows[0]!.lapsed).toBe(true);
    await e.ops.cancel(id, { reason: 'spins' }, { ...OPERATOR, env: 'team-a' });
  });
});

describeEachDriver("a claim takes envs in turn, so one env's backlog does not starve another's instance", (getDb) => {
  const logic = uniqueLogic({ start: 'a', steps: { a: { kind: 'proxy', path: '/a' } } });

  async function insert(env: string, n: number): Promise<string[]> {
    const ids: string[] = [];
    await inEnv(getDb(), env, async (c) => {
      await publishLogicVersion(c, env, logic).catch(() => false);
      for (let i = 0; i < n; i++) {
        const t = await begin(logic, newInstance(logic, { env, input: { i }, correlationId: null }));
        await insertWorkflow(c, t, { idempotencyKey: null });
        ids.push(t.instance.id);
      }
    });
    return ids;
  }

  it('the instance of env B started after 200 of env A is in the next claim of 10, as is the next of env C', async () => {
    const backlog = await insert('flood-a', 200);
    // B's and C's instances fall due after all of A's
    await asScheduler(getDb(), (c) => c.query(`UPDATE workflows SET run_at = now() - interval '1 minute' WHERE env_id = 'flood-a'`));
    const [b] = await insert('quiet-b', 1);
    const [c1, c2] = await insert('quiet-c', 2);
    const claimed = (await claimWorkflows(getDb().pool, { limit: 10, leaseMs: 30_000 })).map((s) => s.instance.id);
    expect(claimed).toHaveLength(10);
    expect(claimed).toContain(b);
    expect(claimed).toContain(c1);
    expect(claimed).toContain(c2);
    expect(claimed.filter((id) => backlog.includes(id))).toHaveLength(7);
    // the rest of the backlog is claimed as before, none twice
    const rest = new Set<string>();
    for (let round = 0; round < 30; round++) {
      const more = await claimWorkflows(getDb().pool, { limit: 50, leaseMs: 30_000 });
      for (const s of more) rest.add(s.instance.id);
      if (more.length === 0) break;
    }
    expect(rest.size).toBe(193);
  });

  it('a claim for named envs takes only their instances, in turn, and leaves the backlog', async () => {
    const backlog = await insert('named-a', 50);
    const [b] = await insert('named-b', 1);
    const [c1, c2] = await insert('named-c', 2);
    const claimed = (await claimWorkflows(getDb().pool, { limit: 2, leaseMs: 30_000, envs: ['named-b', 'named-c'] })).map((s) => s.instance.id);
    expect(claimed.sort()).toEqual([b, c1].sort());
    expect((await claimWorkflows(getDb().pool, { limit: 5, leaseMs: 30_000, envs: ['named-b'] })).length).toBe(0);
    const rest = (await claimWorkflows(getDb().pool, { limit: 100, leaseMs: 30_000 })).map((s) => s.instance.id);
    expect(rest).toContain(c2);
    expect(rest.filter((id) => backlog.includes(id))).toHaveLength(50);
  });
});

/**
 * A pool full of one env's instances keeps room for an env it holds none of (migration 0048): a
 * start there is leased to it over its bound, and an instance made runnable there (a decision)
 * is claimed over it. The executors run an env that holds none of them at once, so the other
 * env's call goes out while the first env's calls are still held by its service.
 */
describeEachDriver("a full pool keeps room for an env it holds nothing of", (getDb) => {
  let held: Awaited<ReturnType<typeof gatedService>>;
  let quick: FakeService;
  let engine: Engine;
  const busy = uniqueLogic({ domain: 'svc', start: 'call', steps: { call: { kind: 'proxy', handler: 'held', path: '/held' } } });
  const prompt = uniqueLogic({ domain: 'svc', start: 'call', steps: { call: { kind: 'proxy', handler: 'quick', path: '/quick' } } });
  const approved = uniqueLogic({
    domain: 'svc',
    start: 'approve',
    steps: { approve: { kind: 'decision', options: ['ok'], next: 'call' }, call: { kind: 'proxy', handler: 'quick', path: '/quick' } },
  });
  const APPROVER = { subject: 'alice', scopes: ['flow:decide'] };

  beforeAll(async () => {
    held = await gatedService('/held');
    quick = await new FakeService().on('/quick', () => ({ status: 200, body: { ok: true } })).listen();
    engine = new Engine({
      db: getDb(),
      env: 'room-a',
      executors: { handlers: new Map([['HELD', { url: held.svc.url }], ['QUICK', { url: quick.url }]]) },
      // one executor, so one of env A's instances fills it
      worker: { concurrency: 1, pollMs: 20 },
    });
    await engine.publish(busy, 'room-a');
    await engine.publish(prompt, 'room-b');
    await engine.publish(approved, 'room-c');
    await engine.workers.start();
  });
  afterAll(async () => {
    held.open();
    await engine.close();
    await held.svc.close();
    await quick.close();
  });

  it("a start in env B is driven while env A's instances fill the pool, and so is env C's instance once decided", async () => {
    // env C's instance parks at its decision first, and lets go of its executor
    const { id: decided } = await engine.start({ logicId: approved.logicId, input: {}, env: 'room-c' });
    await waitFor('the decision parked', async () => ((await engine.get(decided, 'room-c')).state === 'waiting' ? true : undefined));
    for (let i = 0; i < 3; i++) await engine.start({ logicId: busy.logicId, input: { i }, env: 'room-a' });
    await waitFor("env A's first call held", async () => (held.svc.calls('/held').length === 1 ? true : undefined));

    const { id } = await engine.start({ logicId: prompt.logicId, input: {}, env: 'room-b' });
    await waitFor("env B's call", async () => (quick.calls('/quick').some((c) => c.headers['x-flow-workflow-id'] === id) ? true : undefined), { timeoutMs: 10_000 });
    // leased at its start, with no claim between (a claim would move the row version on: 3, not 2)
    const row = await waitFor("env B's instance completed", async () => {
      const r = (await getDb().pool.query<{ state: string; row_version: string }>('SELECT state, row_version FROM workflows WHERE id = $1', [id])).rows[0]!;
      return r.state === 'completed' ? r : undefined;
    });
    expect(row.row_version).toBe('2');
    await engine.resume(decided, { step: 'approve', option: 'ok', approver: APPROVER }, { env: 'room-c' });
    await waitFor("env C's call", async () => (quick.calls('/quick').some((c) => c.headers['x-flow-workflow-id'] === decided) ? true : undefined), { timeoutMs: 10_000 });
    // env A's calls were held all along: one went out, the other two wait for the executor
    expect(held.svc.calls('/held')).toHaveLength(1);
    held.open();
    await waitFor("env A's instances completed", async () => (held.svc.calls('/held').length === 3 ? true : undefined));
  });
});

describe('the timeout caps, from the configuration', () => {
  it('default to 5 minutes for any step and 1 minute for a module run, reach the workers, and refuse a bad value naming it', () => {
    const config = loadConfig({});
    expect(config.timeoutCaps).toEqual({ stepMs: 300_000, funcMs: 60_000 });
    const set = loadConfig({ FLOW_STEP_TIMEOUT_MAX_MS: '120000', FLOW_FUNC_TIMEOUT_MAX_MS: '5000' });
    expect(engineOptionsFrom(set, {} as Db, { worker: { concurrency: 4 } }).worker).toMatchObject({ concurrency: 4, timeoutCaps: { stepMs: 120_000, funcMs: 5_000 } });
    expect(() => loadConfig({ FLOW_FUNC_TIMEOUT_MAX_MS: '0' })).toThrow(expect.objectContaining({ code: 'FLOW_CONFIG_INVALID', message: expect.stringContaining('FLOW_FUNC_TIMEOUT_MAX_MS') }));
    expect(() => loadConfig({ FLOW_STEP_TIMEOUT_MAX_MS: 'soon' })).toThrow(expect.objectContaining({ code: 'FLOW_CONFIG_INVALID', message: expect.stringContaining('FLOW_STEP_TIMEOUT_MAX_MS') }));
  });
});
