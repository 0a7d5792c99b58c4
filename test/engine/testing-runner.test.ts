import { describe, expect, it } from 'vitest';
import type { StepDef } from '../../contracts/index.ts';
import { type Fake, fakes, replay, TestRunner } from '../../engine/testing/index.ts';
import { makeLogic } from '../contracts/helpers.ts';

const MIN = 60_000;
const ann = { subject: 'ann', scopes: ['payments:approve'] };

const approval = (extra: Partial<Extract<StepDef, { kind: 'decision' }>> = {}) =>
  makeLogic({
    start: 'approve',
    steps: {
      approve: { kind: 'decision', options: ['yes', 'no'], approverScope: 'payments:approve', next: 'after', ...extra },
      after: { kind: 'pass', input: '{ "option": decision.option, "by": decision.approvedBy }' },
      late: { kind: 'pass', input: '{ "late": true }' },
    },
  });

describe('TestRunner: waiting and time', () => {
  it('a decision waits without a timer; a refused resume changes nothing; a valid one runs on with the decision', async () => {
    const flow = await new TestRunner(approval(), {}).start({});
    expect(flow.instance.state).toBe('waiting');
    expect(flow.timers).toEqual([]);
    const before = structuredClone({ instance: flow.instance, trace: flow.trace });
    await expect(flow.resume({ step: 'approve', option: 'maybe', approver: ann })).rejects.toMatchObject({ code: 'FLOW_BAD_OPTION' });
    await expect(flow.resume({ step: 'approve', option: 'yes', approver: { subject: 'bob', scopes: [] } })).rejects.toMatchObject({
      code: 'FLOW_APPROVER_FORBIDDEN',
    });
    expect({ instance: flow.instance, trace: flow.trace }).toEqual(before);
    await flow.resume({ step: 'approve', option: 'yes', approver: ann });
    expect(flow.instance.state).toBe('completed');
    expect(flow.instance.output).toEqual({ option: 'yes', by: 'ann' });
    expect(flow.trace.entries.map((e) => e.event.type)).toEqual(['begin', 'resume']);
    expect(await replay(approval(), flow.trace)).toEqual(flow.instance);
  });

  it('a deadline is a virtual timer: nothing fires before it, onTimeout is followed when it does', async () => {
    const runner = new TestRunner(approval({ deadline: 'PT1H', onTimeout: 'late' }), {});
    const flow = await runner.start({});
    const seq = flow.instance.ctx.running!.seq;
    expect(flow.timers).toEqual([{ purpose: 'deadline', seq, fireAtMs: runner.now + 60 * MIN }]);
    await flow.advance(59 * MIN);
    expect(flow.instance.state).toBe('waiting');
    await flow.advance(MIN);
    expect(flow.instance.state).toBe('completed');
    expect(flow.instance.output).toEqual({ late: true });
    expect(flow.trace.entries.at(-1)).toMatchObject({ event: { type: 'timer', purpose: 'deadline', seq }, decision: { cause: 'deadline_expired' } });
  });

  it('an answered decision leaves its deadline stale: firing it later changes nothing', async () => {
    const logic = makeLogic({
      start: 'first',
      steps: {
        first: { kind: 'decision', options: ['ok'], deadline: 'PT10M', next: 'second' },
        second: { kind: 'decision', options: ['ok'] },
      },
    });
    const flow = await new TestRunner(logic, {}).start({});
    await flow.resume({ step: 'first', option: 'ok', approver: ann });
    await flow.advance(11 * MIN);
    expect(flow.instance.state).toBe('waiting');
    expect(flow.instance.currentStep).toBe('second');
    expect(flow.trace.entries.at(-1)).toMatchObject({ event: { type: 'timer', purpose: 'deadline' }, decision: null });
  });

  it('delays fire by duration or at an `until` timestamp, in time order', async () => {
    const logic = makeLogic({
      start: 'wait',
      steps: {
        wait: { kind: 'delay', duration: 'PT5M', next: 'until' },
        until: { kind: 'delay', until: '"2025-01-01T02:00:00.000Z"', next: 'done' },
        done: { kind: 'pass' },
      },
    });
    const runner = new TestRunner(logic, {});
    const flow = await runner.start({ a: 1 });
    await flow.advance(4 * MIN);
    expect(flow.instance.currentStep).toBe('wait');
    await flow.advance(3 * 60 * MIN);
    expect(flow.instance.state).toBe('completed');
    expect(flow.trace.entries.filter((e) => e.event.type === 'timer').map((e) => e.atMs - Date.UTC(2025, 0, 1))).toEqual([5 * MIN, 120 * MIN]);
  });

  it('retry backoff moves the virtual clock on its own', async () => {
    const logic = makeLogic({ start: 'call', steps: { call: { kind: 'proxy', path: '/x', retry: { maxAttempts: 3, initialMs: 1000 } } } });
    const runner = new TestRunner(logic, { 'test/x': fakes.transient(2) });
    const { instance, elapsedMs } = await runner.run({});
    expect(instance.state).toBe('completed');
    expect(elapsedMs).toBeGreaterThanOrEqual(500 + 1000);
    expect(runner.now - Date.UTC(2025, 0, 1)).toBe(elapsedMs);
  });
});

describe('TestRunner: 202-parked steps', () => {
  const logic = makeLogic({ start: 'capture', steps: { capture: { kind: 'proxy', path: '/capture', next: 'done' }, done: { kind: 'pass' } } });

  it('completes through the parked seq; a repeat is answered as the engine answers it and changes nothing', async () => {
    const seen: number[] = [];
    const parked: Fake = (call) => {
      seen.push(call.seq);
      return { status: 'parked' };
    };
    const flow = await new TestRunner(logic, { 'test/capture': parked }).start({});
    expect(flow.instance.state).toBe('waiting');
    expect(flow.parkedSeq).toBe(seen[0]);
    await flow.complete({ status: 'succeeded', output: { captured: true } });
    expect(flow.instance.state).toBe('completed');
    const before = structuredClone({ instance: flow.instance, trace: flow.trace });
    // the same body again: answered as the first delivery was
    expect(await flow.complete({ status: 'succeeded', output: { captured: true } })).toEqual(before.instance);
    expect({ instance: flow.instance, trace: flow.trace }).toEqual(before);
    // another body for that attempt: answered differently
    await expect(flow.complete({ status: 'succeeded', output: { again: true } })).rejects.toMatchObject({ code: 'FLOW_CALLBACK_ANSWERED_DIFFERENTLY' });
    expect({ instance: flow.instance, trace: flow.trace }).toEqual(before);
    // an attempt that took no completion: stale
    await expect(flow.complete({ status: 'succeeded', output: { captured: true } }, { seq: 999 })).rejects.toMatchObject({ code: 'FLOW_STALE_TOKEN' });
    expect({ instance: flow.instance, trace: flow.trace }).toEqual(before);
    expect(flow.trace.entries.map((e) => e.event.type)).toEqual(['begin', 'outcome', 'callback']);
    expect(await replay(logic, flow.trace)).toEqual(flow.instance);
  });

  it('a transient completion retries the step, which may park again under a new seq', async () => {
    const flow = await new TestRunner(logic, { 'test/capture': fakes.parked() }).start({});
    const first = flow.parkedSeq;
    await flow.complete({ status: 'failed', retryable: true, error: { code: 'HTTP_503', message: 'later' } });
    expect(flow.instance.state).toBe('waiting');
    expect(flow.parkedSeq).not.toBe(first);
    // the first attempt took the transient completion: another body for it is answered differently
    await expect(flow.complete({ status: 'succeeded', output: 1 }, { seq: first! })).rejects.toMatchObject({ code: 'FLOW_CALLBACK_ANSWERED_DIFFERENTLY' });
    await flow.complete({ status: 'succeeded', output: 1 });
    expect(flow.instance.state).toBe('completed');
  });

  it('calls are refused while the runner is still driving', async () => {
    const flow = await new TestRunner(logic, { 'test/capture': fakes.parked() }).start({});
    const first = flow.complete({ status: 'succeeded', output: 1 });
    await expect(flow.advance(1)).rejects.toThrow(/still driving/);
    await first;
  });
});

describe('TestRunner: children', () => {
  const child = makeLogic({
    logicId: 'kid',
    start: 'work',
    output: 'steps.work',
    steps: {
      work: { kind: 'proxy', path: '/work', input: '{ "n": input.n }', next: 'rest' },
      rest: { kind: 'choice', branches: [{ when: 'input.n > 1', next: 'nap' }], otherwise: 'end' },
      nap: { kind: 'delay', duration: 'PT1M' },
      end: { kind: 'pass' },
    },
  });
  const parent = (failurePolicy: 'fail_fast' | 'all_settled') =>
    makeLogic({
      start: 'fan',
      steps: {
        fan: { kind: 'children', logicId: 'kid', items: 'input.ns', itemInput: '{ "n": item }', failurePolicy, next: 'sum' },
        sum: { kind: 'pass', input: '{ "out": steps.fan }' },
      },
    });
  const work: Fake = (call) => {
    const n = (call.input as { n: number }).n;
    return n < 0 ? { status: 'failed', retryable: false, error: { code: 'HTTP_422', message: 'no' } } : { status: 'succeeded', output: n * 2 };
  };

  it('runs children to rest, then fans in when the last one ends', async () => {
    const runner = new TestRunner(parent('fail_fast'), { 'test/work': work }, { logics: [child] });
    const flow = await runner.start({ ns: [1, 2] });
    expect(flow.children.map((c) => [c.instance.branchIndex, c.instance.state])).toEqual([
      [0, 'completed'],
      [1, 'waiting'],
    ]);
    expect(flow.instance.state).toBe('waiting');
    await flow.advance(MIN);
    expect(flow.instance.state).toBe('completed');
    expect(flow.instance.output).toEqual({ out: [2, 4] });
    const fanIns = flow.trace.entries.filter((e) => e.event.type === 'children');
    expect(fanIns.map((e) => [e.event.type === 'children' ? e.event.state.open : -1, e.decision?.cause ?? null])).toEqual([
      [1, null],
      [0, 'resumed'],
    ]);
    expect(await replay(parent('fail_fast'), flow.trace)).toEqual(flow.instance);
    for (const c of flow.children) expect(await replay(child, c.trace)).toEqual(c.instance);
  });

  it('fail_fast fails the parent and cancels the children still open', async () => {
    const flow = await new TestRunner(parent('fail_fast'), { 'test/work': work }, { logics: [child] }).start({ ns: [5, -1] });
    expect(flow.instance).toMatchObject({ state: 'failed', error: { code: 'CHILD_FAILED' } });
    expect(flow.children.map((c) => [c.instance.state, c.cancelledByParent])).toEqual([
      ['cancelled', true],
      ['failed', false],
    ]);
    expect(flow.children[0]!.timers).toEqual([]);
  });

  it('all_settled reports every ending in item order', async () => {
    const flow = await new TestRunner(parent('all_settled'), { 'test/work': work }, { logics: [child] }).start({ ns: [1, -1] });
    expect(flow.instance.output).toEqual({
      out: [
        { state: 'completed', output: 2, error: null },
        { state: 'failed', output: null, error: expect.objectContaining({ code: 'HTTP_422' }) },
      ],
    });
  });

  it('a child LogicVersion the runner was not given is a loud error', async () => {
    await expect(new TestRunner(parent('fail_fast'), { 'test/work': work }).start({ ns: [1] })).rejects.toThrow(/kid@active.*pass it in \{ logics \}/);
  });
});

describe('TestRunner: restore and replay', () => {
  it('restores a parked instance from its trace, timers and all, without calling anything', async () => {
    const logic = makeLogic({
      start: 'call',
      steps: { call: { kind: 'proxy', path: '/x', next: 'nap' }, nap: { kind: 'delay', duration: 'PT2M', next: 'end' }, end: { kind: 'proxy', path: '/y' } },
    });
    const calls: string[] = [];
    const fake: Fake = (c) => {
      calls.push(c.step);
      return { status: 'succeeded', output: c.step };
    };
    const first = await new TestRunner(logic, { 'test/x': fake, 'test/y': fake }).start({});
    const runner = new TestRunner(logic, { 'test/x': fake, 'test/y': fake });
    const again = await runner.restore(first.trace);
    expect(calls).toEqual(['call']);
    expect(again.instance).toEqual(first.instance);
    expect(again.timers).toEqual(first.timers);
    await again.advance(2 * MIN);
    expect(again.instance.state).toBe('completed');
    expect(calls).toEqual(['call', 'end']);
  });

  it('an event the core now refuses is a divergence, reported as FLOW_REPLAY_DIVERGED', async () => {
    const flow = await new TestRunner(approval(), {}).start({});
    await flow.resume({ step: 'approve', option: 'no', approver: ann });
    const tampered = structuredClone(flow.trace);
    const resume = tampered.entries[1]!.event;
    if (resume.type === 'resume') resume.args.option = 'perhaps';
    await expect(replay(approval(), tampered)).rejects.toMatchObject({
      code: 'FLOW_REPLAY_DIVERGED',
      details: { index: 1, actual: { refused: 'FLOW_BAD_OPTION' } },
    });
  });
});
