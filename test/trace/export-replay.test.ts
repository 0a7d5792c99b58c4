import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { canonicalJson, type LogicVersion } from '../../contracts/index.ts';
import { artifactModules } from '../../engine/runtime/artifacts.ts';
import { bearer, testApi } from '../api/support.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { exportTrace, replay, TRACE_FORMAT, type Trace } from '../../engine/testing/index.ts';
import { createFuncRuntime, type FuncRuntime } from '../../host-functions/index.ts';
import { buildTestModules, type BuiltTestModules, TEST_MEMORY_PAGES } from '../host-functions/helpers/test-modules.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { OPERATOR, settle, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

const run = promisify(execFile);
const BIN = new URL('../../bin/s8flow.mjs', import.meta.url).pathname;
const APPROVER = { subject: 'alice', scopes: ['flow:decide', 'payments:approve'] };

/**
 * A production run becomes a regression test: an instance run by the real engine on the store —
 * a retried step, a decision, a func step with a host call, a failure that compensates, then an
 * operator repair — is exported from the journal and replayed through the core alone.
 */
describeEachDriver('traces exported from the store', (getDb, driver) => {
  let svc: FakeService;
  let built: BuiltTestModules;
  let runtime: FuncRuntime;
  let engine: Engine;
  let reserveFailures = 0;
  let declineCharge = true;
  beforeAll(async () => {
    built = await buildTestModules(['one-call']);
    runtime = createFuncRuntime({ loadModule: built.load, maxMemoryPages: TEST_MEMORY_PAGES });
    svc = await new FakeService()
      .on('/reserve', (r) => {
        if (reserveFailures > 0) {
          reserveFailures--;
          return { status: 503 };
        }
        return { status: 200, body: { id: `res-${(r.body as { n: number }).n}` } };
      })
      .on('/release', () => ({ status: 200, body: { released: true } }))
      .on('/lookup', (r) => ({ status: 200, body: { score: (r.body as { n: number }).n * 10 } }))
      .on('/charge', () => (declineCharge ? { status: 422, body: { message: 'card declined' } } : { status: 200, body: { charged: true } }))
      .listen();
    engine = new Engine({ db: getDb(), env: 'test-env', executors: { handlers: new Map([['TEST', { url: svc.url }]]), funcRuntime: runtime } });
  }, 120_000);
  afterAll(async () => {
    await runtime.close();
    await svc.close();
    await built.cleanup();
  });

  const steps = (chargeInput: string) => ({
    reserve: {
      kind: 'proxy' as const,
      handler: 'test',
      path: '/reserve',
      input: '{ "n": input.n }',
      retry: { maxAttempts: 3, initialMs: 1 },
      compensate: { kind: 'proxy' as const, handler: 'test', path: '/release' },
      next: 'approve',
    },
    approve: { kind: 'decision' as const, options: ['go', 'stop'], approverScope: 'payments:approve', next: 'score' },
    score: { kind: 'func' as const, module: 'risk', input: '{ "n": input.n }', next: 'charge' },
    charge: {
      kind: 'proxy' as const,
      handler: 'test',
      path: '/charge',
      input: chargeInput,
    },
  });
  const V1_CHARGE = '{ "res": steps.reserve.id, "score": steps.score.response.score }';
  const logicOf = (logicId: string, version: number, chargeInput = V1_CHARGE): LogicVersion =>
    makeLogic({
      logicId,
      version,
      start: 'reserve',
      modules: { risk: { sha256: built.hash['one-call']!, imports: { lookup: { path: '/lookup' } } } },
      steps: steps(chargeInput),
    });

  /** Publishes with the bytes of every module the version declares, as CI's `s8flow publish` does. */
  async function publish(logic: LogicVersion): Promise<void> {
    await engine.publishVersion('test-env', logic, await artifactModules(built.dir, logic));
  }

  async function recordedRun() {
    const logic = logicOf(uniqueLogic({ start: 'x', steps: {} }).logicId, 1);
    await publish(logic);
    reserveFailures = 1;
    declineCharge = true;
    const { id } = await engine.start({ logicId: logic.logicId, input: { n: 4 }, env: 'test-env' });
    await settle(engine);
    await engine.resume(id, { step: 'approve', option: 'go', approver: APPROVER }, { env: 'test-env' });
    await settle(engine);
    expect((await engine.get(id, 'test-env')).state).toBe('compensated');
    // an operator repairs it after the card is fixed: a verb is an input too
    declineCharge = false;
    await engine.ops.repair(id, { rewindTo: 'charge' }, { ...OPERATOR, env: 'test-env', reason: 'card fixed' });
    await settle(engine);
    return { id, logic };
  }

  it('replays an exported run to the same final record, calling nothing', async () => {
    const { id, logic } = await recordedRun();
    const record = await engine.get(id, 'test-env');
    expect(record.state).toBe('completed');
    const trace = await exportTrace(engine, 'test-env', id);
    expect(trace.format).toBe(TRACE_FORMAT);
    expect(trace.logicHash).toBe(logic.hash);
    // what the issue names: retries, a decision, a func step's host call, a compensation, a verb
    const types = trace.entries.map((e) => e.event.type);
    expect(types).toEqual(expect.arrayContaining(['begin', 'outcome', 'resume', 'progress', 'verb']));
    const outcomes = trace.entries.flatMap((e) => (e.event.type === 'outcome' ? [e.event.outcome] : []));
    expect(outcomes.some((o) => o.status === 'failed' && o.retryable)).toBe(true);
    expect(trace.entries.some((e) => e.decision?.state === 'compensating')).toBe(true);
    // a file holds it: JSON in, JSON out
    const file = JSON.parse(JSON.stringify(trace)) as typeof trace;

    const calls = svc.received.length;
    const loads = built.load.calls;
    const final = await replay(logic, file);
    expect(svc.received.length).toBe(calls);
    expect(built.load.calls).toBe(loads);
    expect({ state: final.state, output: final.output, generation: final.generation, currentStep: final.currentStep }).toEqual({
      state: record.state,
      output: record.output,
      generation: record.generation,
      currentStep: record.currentStep,
    });
    expect(canonicalJson(final.ctx.compensations)).toBe(canonicalJson((await storedCtx(id)).compensations));
  });

  it('names the first divergence when the trace is replayed against a newer version of the logic', async () => {
    const { id, logic } = await recordedRun();
    const trace = await exportTrace(engine, 'test-env', id);
    // v2 sends the charge in cents: the first decision that prepares a charge differs
    const v2 = logicOf(logic.logicId, 2, '{ "res": steps.reserve.id, "cents": steps.score.response.score * 100 }');
    const prepares = trace.entries.findIndex((e) => e.decision?.attempts.some((a) => a.op === 'insert' && a.step === 'charge'));
    const err = await replay(v2, trace).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'FLOW_REPLAY_DIVERGED', details: { index: prepares, event: 'outcome', step: 'score', attempt: 1 } });
    const details = (err as { details: { field: string; expected: unknown; actual: unknown } }).details;
    expect(details.field).toMatch(/^attempts\[\d+\]\.input\.(cents|score)$/);
    expect((err as Error).message).toContain('(step score, attempt 1)');
  });

  it('refuses a trace of another workflow, and a tampered final record diverges at the end', async () => {
    const { id, logic } = await recordedRun();
    const trace = await exportTrace(engine, 'test-env', id);
    await expect(replay(makeLogic({ logicId: 'other.flow', start: 'a', steps: { a: { kind: 'pass' } } }), trace)).rejects.toMatchObject({
      code: 'FLOW_REPLAY_WRONG_VERSION',
    });
    const tampered = { ...trace, final: { ...trace.final!, state: 'failed' as const } };
    await expect(replay(logic, tampered)).rejects.toMatchObject({
      details: { index: trace.entries.length, event: 'end', field: 'state' },
    });
  });

  it.skipIf(driver !== 'postgres')('s8flow trace writes the same trace to a file', async () => {
    const { id, logic } = await recordedRun();
    const dir = await mkdtemp(join(tmpdir(), 's8flow-trace-'));
    try {
      const out = join(dir, 'trace.json');
      await run(process.execPath, [BIN, 'trace', id, '--env', 'test-env', '--out', out], {
        env: { ...process.env, FLOW_SCHEMA: getDb().schema },
      });
      const file = JSON.parse(await readFile(out, 'utf8')) as Trace;
      expect(file).toEqual(JSON.parse(JSON.stringify(await exportTrace(engine, 'test-env', id))));
      expect((await replay(logic, file)).state).toBe('completed');
      const missing = await run(process.execPath, [BIN, 'trace', id, '--env', 'other-env'], {
        env: { ...process.env, FLOW_SCHEMA: getDb().schema },
      }).catch((e: { code: number; stderr: string }) => e);
      expect(missing).toMatchObject({ code: 1, stderr: expect.stringContaining('FLOW_NOT_FOUND') });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('GET …/history?format=trace answers the same trace, which replays; a token for another env gets 404', async () => {
    const { id, logic } = await recordedRun();
    const api = await testApi(engine);
    try {
      const url = `/v1/envs/test-env/workflows/${id}/history?format=trace`;
      const res = await api.app.inject({ url, headers: await bearer({ envs: ['test-env'], scope: 'flow:read' }) });
      expect(res.statusCode).toBe(200);
      const trace = res.json() as Trace;
      expect(trace).toEqual(JSON.parse(JSON.stringify(await exportTrace(engine, 'test-env', id))));
      expect((await replay(logic, trace)).state).toBe('completed');
      const elsewhere = await api.app.inject({ url: url.replace('test-env', 'other-env'), headers: await bearer({ envs: ['other-env'], scope: 'flow:read' }) });
      expect(elsewhere.statusCode).toBe(404);
      const plain = await api.app.inject({ url: url.replace('?format=trace', ''), headers: await bearer({ envs: ['test-env'], scope: 'flow:read' }) });
      expect(Object.keys(plain.json()).sort()).toEqual(['attempts', 'audit', 'compensations', 'id']);
    } finally {
      await api.close();
    }
  });

  it('a parent and each of its children export traces of their own that replay, fan-in included', async () => {
    const child = logicOf(uniqueLogic({ start: 'x', steps: {} }).logicId, 1);
    await publish(child);
    const parent = uniqueLogic({
      start: 'fan',
      steps: { fan: { kind: 'children', logicId: child.logicId, items: 'input.ns', itemInput: '{ "n": item }', failurePolicy: 'all_settled' } },
    });
    await publish(parent);
    reserveFailures = 0;
    declineCharge = false;
    const { id } = await engine.start({ logicId: parent.logicId, input: { ns: [1, 2] }, env: 'test-env' });
    await settle(engine);
    const kids = await getDb().pool.query<{ id: string }>('SELECT id FROM workflows WHERE parent_id = $1 ORDER BY branch_index', [id]);
    for (const k of kids.rows) await engine.resume(k.id, { step: 'approve', option: 'go', approver: APPROVER }, { env: 'test-env' });
    await settle(engine);
    expect((await engine.get(id, 'test-env')).state).toBe('completed');
    const trace = await exportTrace(engine, 'test-env', id);
    expect(trace.entries.filter((e) => e.event.type === 'children').at(-1)?.decision?.cause).toBe('resumed');
    expect((await replay(parent, trace)).output).toEqual((await engine.get(id, 'test-env')).output);
    for (const k of kids.rows) expect((await replay(child, await exportTrace(engine, 'test-env', k.id))).state).toBe('completed');
  });

  it('an unknown instance is FLOW_NOT_FOUND', async () => {
    await expect(exportTrace(getDb(), 'test-env', '00000000-0000-4000-8000-000000000000')).rejects.toMatchObject({ code: 'FLOW_NOT_FOUND' });
  });

  async function storedCtx(id: string) {
    const res = await getDb().pool.query<{ ctx: { compensations: unknown } }>('SELECT ctx FROM workflows WHERE id = $1', [id]);
    return res.rows[0]!.ctx;
  }
});
