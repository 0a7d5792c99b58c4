import { afterAll, beforeAll, expect, it } from 'vitest';
import type { StepDef } from '../../contracts/index.ts';
import { attemptTimeoutMs } from '../../engine/core/flow.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { fakes, replay, TestRunner } from '../../engine/testing/index.ts';
import { describeEachDriver } from '../support/db.ts';
import { advance, settle, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

const ENV = 'callback-timeout';

/**
 * A step answered 202 waiting is completed later by a callback. With `timeoutMs`, the wait is
 * bounded: a timer row on the database clock times the attempt out as FLOW_CALLBACK_TIMEOUT,
 * which is retryable — the step's retry policy calls again, then onError or dead-letter.
 */
describeEachDriver('a parked step times out into its retry policy', (getDb) => {
  let svc: FakeService;
  let engine: Engine;

  beforeAll(async () => {
    svc = await new FakeService()
      .on('/async', () => ({ status: 202, body: { status: 'waiting' } }))
      .on('/release', () => new Promise(() => {}))
      .on('/reserve', () => ({ status: 200, body: { id: 'r-1' } }))
      .listen();
    engine = new Engine({ db: getDb(), env: ENV, executors: { handlers: new Map([['TEST', { url: svc.url }]]) } });
  });
  afterAll(async () => {
    await engine?.close();
    await svc?.close();
  });

  async function start(steps: Record<string, StepDef>, startAt: string) {
    const logic = uniqueLogic({ start: startAt, steps });
    await engine.publish(logic);
    const { id } = await engine.start({ logicId: logic.logicId, input: {} });
    await settle(engine);
    return id;
  }
  const callsFor = (path: string, id: string) => svc.calls(path).filter((r) => r.headers['x-flow-workflow-id'] === id);

  it('times out, retries with the same key, and dead-letters with FLOW_CALLBACK_TIMEOUT once attempts run out', async () => {
    const id = await start({ job: { kind: 'proxy', path: '/async', timeoutMs: 60_000, retry: { maxAttempts: 2, initialMs: 10 } } }, 'job');
    expect((await engine.get(id)).state).toBe('waiting');
    // not yet: the wait is 60 s on the database clock
    await advance(engine, 30_000);
    expect((await engine.get(id)).state).toBe('waiting');
    await advance(engine, 30_000);
    expect(callsFor('/async', id)).toHaveLength(2);
    await advance(engine, 60_000);
    const record = await engine.get(id);
    expect(record.state).toBe('dead_lettered');
    expect(record.error).toMatchObject({ code: 'FLOW_CALLBACK_TIMEOUT', step: 'job' });
    expect(record.steps.map((s) => [s.attempt, s.state, s.error?.code ?? null])).toEqual([
      [1, 'failed', 'FLOW_CALLBACK_TIMEOUT'],
      [2, 'failed', 'FLOW_CALLBACK_TIMEOUT'],
    ]);
    expect(new Set(callsFor('/async', id).map((r) => r.headers['idempotency-key']))).toEqual(new Set([`${id}:job:0`]));
  });

  it('takes onError when the step has one; a callback before the timeout leaves the timer stale', async () => {
    const routed = await start(
      {
        job: { kind: 'proxy', path: '/async', timeoutMs: 1000, retry: { maxAttempts: 1 }, onError: 'fallback' },
        fallback: { kind: 'pass', input: '{ "code": steps.job.error.code }' },
      },
      'job',
    );
    await advance(engine, 1000);
    expect(await engine.get(routed)).toMatchObject({ state: 'completed', output: { code: 'FLOW_CALLBACK_TIMEOUT' } });

    const answered = await start({ job: { kind: 'proxy', path: '/async', timeoutMs: 1000, retry: { maxAttempts: 1 } } }, 'job');
    const token = callsFor('/async', answered)[0]!.headers['x-flow-resume-token']!;
    await engine.complete(token, { output: { done: true } });
    await advance(engine, 5000);
    expect(await engine.get(answered)).toMatchObject({ state: 'completed', output: { done: true } });
  });

  it('a parked step without timeoutMs waits without a timer', async () => {
    const id = await start({ job: { kind: 'proxy', path: '/async' } }, 'job');
    const timers = await asScheduler(getDb(), (c) => c.query('SELECT 1 FROM timers WHERE workflow_id = $1', [id]));
    expect(timers.rows).toHaveLength(0);
  });

  it('a compensation takes its timeout from its own action, not from the forward step', async () => {
    const logic = uniqueLogic({
      start: 'reserve',
      steps: {
        reserve: {
          kind: 'proxy',
          path: '/reserve',
          timeoutMs: 600_000,
          compensate: { kind: 'proxy', path: '/release', timeoutMs: 200, retry: { maxAttempts: 1 } },
          next: 'stop',
        },
        stop: { kind: 'fail', code: 'STOP' },
      },
    });
    expect(attemptTimeoutMs(logic, { kind: 'compensation', step: 'reserve' })).toBe(200);
    expect(attemptTimeoutMs(logic, { kind: 'step', step: 'reserve' })).toBe(600_000);
    expect(attemptTimeoutMs(logic, { kind: 'step', step: 'stop' })).toBe(30_000);
    await engine.publish(logic);
    const { id } = await engine.start({ logicId: logic.logicId, input: {} });
    await settle(engine);
    const record = await engine.get(id);
    expect(record.state).toBe('dead_lettered');
    expect(record.compensations[0]?.error).toMatchObject({ code: 'STEP_TIMEOUT' });
  });
});

describeEachDriver('Engine.settled', (getDb) => {
  it('rejects with FLOW_SETTLE_TIMEOUT when the instance is not settled in time', async () => {
    const engine = new Engine({ db: getDb(), env: ENV });
    const logic = uniqueLogic({ start: 'p', steps: { p: { kind: 'proxy', path: '/nowhere' } } });
    await engine.publish(logic);
    // no workers run: the instance stays pending
    const { id } = await engine.start({ logicId: logic.logicId, input: {} });
    await expect(engine.settled(id, { timeoutMs: 100 })).rejects.toMatchObject({ code: 'FLOW_SETTLE_TIMEOUT', status: 408 });
    const parked = uniqueLogic({ start: 'ask', steps: { ask: { kind: 'decision', options: ['ok'] } } });
    await engine.publish(parked);
    const waiting = await engine.start({ logicId: parked.logicId, input: {} });
    expect(await engine.settled(waiting.id, { timeoutMs: 60_000 })).toMatchObject({ state: 'waiting' });
  });
});

it('TestRunner times a parked step out the same way, and its trace replays', async () => {
  const logic = uniqueLogic({ start: 'job', steps: { job: { kind: 'proxy', path: '/async', timeoutMs: 1000, retry: { maxAttempts: 2, initialMs: 10 } } } });
  const flow = await new TestRunner(logic, { 'test/async': fakes.parked() }).start({});
  expect(flow.timers).toEqual([expect.objectContaining({ purpose: 'callback', seq: 0 })]);
  await flow.advance(1000);
  expect(flow.instance.state).toBe('waiting');
  await flow.advance(1000);
  expect(flow.instance).toMatchObject({ state: 'dead_lettered', error: { code: 'FLOW_CALLBACK_TIMEOUT', step: 'job' } });
  expect(await replay(logic, flow.trace)).toEqual(flow.instance);
});
