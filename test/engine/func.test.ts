import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createExecutors } from '../../engine/executors/index.ts';
import { createFuncRuntime, type FuncRuntime } from '../../host-functions/index.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { buildTestModules, type BuiltTestModules, TEST_MEMORY_PAGES } from '../host-functions/helpers/test-modules.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

describeEachDriver('func steps in the engine', (getDb, driver) => {
  let svc: FakeService;
  let built: BuiltTestModules;
  let runtime: FuncRuntime;
  let engine: Engine;
  let failLookups = 0;
  beforeAll(async () => {
    built = await buildTestModules(['one-call']);
    runtime = createFuncRuntime({ loadModule: built.load, maxMemoryPages: TEST_MEMORY_PAGES });
    svc = await new FakeService()
      .on('/lookup', (r) => {
        if (failLookups > 0) {
          failLookups--;
          return { status: 503 };
        }
        return { status: 200, body: { history: [(r.body as { account: string }).account, 'ok'] } };
      })
      .listen();
    engine = new Engine({ db: getDb(), env: 'test-env', executors: { handlers: new Map([['TEST', { url: svc.url }]]), funcRuntime: runtime } });
  }, 120_000);
  afterAll(async () => {
    await runtime.close();
    await svc.close();
    await built.cleanup();
  });

  const logic = () =>
    uniqueLogic({
      domain: 'test',
      start: 'score',
      modules: { risk: { sha256: built.hash['one-call']!, imports: { lookup: { path: '/lookup' } } } },
      steps: { score: { kind: 'func', module: 'risk', input: '{ "account": input.account }', retry: { maxAttempts: 3, initialMs: 0 } } },
    });

  const moduleBytes = async () => ({ [built.hash['one-call']!]: await readFile(join(built.dir, 'modules', `${built.hash['one-call']}.wasm`)) });

  async function run(input: unknown) {
    const l = logic();
    await engine.publishVersion('test-env', l, await moduleBytes());
    const { id } = await engine.start({ logicId: l.logicId, input, env: 'test-env' });
    await settle(engine);
    return engine.get(id, 'test-env');
  }

  it('runs the module, makes its host call once with the call key, records it, and completes', async () => {
    const record = await run({ account: 'acc-1' });
    expect(record.state).toBe('completed');
    expect(record.output).toEqual({ response: { history: ['acc-1', 'ok'] } });
    const calls = svc.calls('/lookup').filter((c) => c.headers['x-flow-workflow-id'] === record.id);
    expect(calls.map((c) => c.headers['idempotency-key'])).toEqual([`${record.id}:score:0:call:0`]);
    expect(calls[0]?.body).toEqual({ account: 'acc-1' });
  });

  it('a transient host-call failure retries the step and the call is made again under the same key', async () => {
    failLookups = 1;
    const record = await run({ account: 'acc-2' });
    expect(record.state).toBe('completed');
    const calls = svc.calls('/lookup').filter((c) => c.headers['x-flow-workflow-id'] === record.id);
    expect(calls.map((c) => c.headers['idempotency-key'])).toEqual([`${record.id}:score:0:call:0`, `${record.id}:score:0:call:0`]);
    expect(record.steps.map((s) => s.state)).toEqual(['failed', 'succeeded']);
  });

  it('an engine given no module runtime loads the module from the database and runs it', async () => {
    const bare = new Engine({ db: getDb(), env: 'test-env', executors: { handlers: new Map([['TEST', { url: svc.url }]]) } });
    try {
      const l = logic();
      await bare.publishVersion('test-env', l, await moduleBytes());
      const { id } = await bare.start({ logicId: l.logicId, input: { account: 'db-1' }, env: 'test-env' });
      await settle(bare);
      const record = await bare.get(id, 'test-env');
      expect(record.state).toBe('completed');
      expect(record.output).toEqual({ response: { history: ['db-1', 'ok'] } });
    } finally {
      await bare.close();
    }
  });

  it('a func step fails with FLOW_FUNC_UNAVAILABLE on executors made without a module runtime', async () => {
    const func = createExecutors({}).func;
    const l = logic();
    const outcome = await func(l.steps['score'] as never, {} as never);
    expect(outcome).toMatchObject({ status: 'failed', retryable: false, error: { code: 'FLOW_FUNC_UNAVAILABLE' } });
  });

  it("starts a module run while the commit that prepared its attempt is in flight, and the attempt takes that run", async () => {
    // two func steps in a chain: each run after the first is started before its transition is
    // reported committed, and no run is made twice (4 runs: each step suspends once on its call)
    const events: string[] = [];
    const watched: FuncRuntime = {
      ...runtime,
      run: (req) => {
        events.push(`run ${req.recorded.length}`);
        return runtime.run(req);
      },
    };
    const chained = new Engine({
      db: getDb(),
      env: 'test-env',
      executors: { handlers: new Map([['TEST', { url: svc.url }]]), funcRuntime: watched },
      observer: { onTransition: (_from, t, committed) => void (committed && events.push(`commit ${t.instance.ctx.running?.step ?? t.instance.state}`)) },
    });
    try {
      const mod = { risk: { sha256: built.hash['one-call']!, imports: { lookup: { path: '/lookup' } } } };
      const l = uniqueLogic({
        domain: 'test',
        start: 'one',
        modules: mod,
        steps: {
          one: { kind: 'func', module: 'risk', input: '{ "account": input.account }', next: 'two' },
          two: { kind: 'func', module: 'risk', input: '{ "account": "second" }' },
        },
      });
      await chained.publishVersion('test-env', l, await moduleBytes());
      const { id } = await chained.start({ logicId: l.logicId, input: { account: 'ahead-1' }, env: 'test-env' });
      await settle(chained);
      const record = await chained.get(id, 'test-env');
      expect(record.state).toBe('completed');
      expect(record.output).toEqual({ response: { history: ['second', 'ok'] } });
      // one: suspends, call made, progress committed (its rerun started first); its success
      // commits with two prepared (two's first run started first); two likewise; completed.
      // A run started ahead waits until the commit has been sent; PGlite commits on this very
      // thread, so there each commit has landed before the run starts, in the same order.
      expect(events).toEqual(
        driver === 'postgres'
          ? ['run 0', 'run 1', 'commit one', 'run 0', 'commit two', 'run 1', 'commit two', 'commit completed']
          : ['run 0', 'commit one', 'run 1', 'commit two', 'run 0', 'commit two', 'run 1', 'commit completed'],
      );
    } finally {
      await chained.close();
    }
  });
});
