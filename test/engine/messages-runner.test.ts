import { describe, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import { replay, TestRunner } from '../../engine/testing/index.ts';
import { makeLogic } from '../contracts/helpers.ts';

/** The in-process runner sends messages as the engine delivers them (test/engine/messages.test.ts holds the engine's side). */
const logic: LogicVersion = makeLogic({
  logicId: 'runner.messages',
  start: 'gate',
  steps: {
    gate: { kind: 'decision', options: ['go'], next: 'first' },
    first: { kind: 'waitFor', message: 'a', schema: { type: 'object', properties: { n: { type: 'number' } }, required: ['n'] }, next: 'second' },
    second: { kind: 'waitFor', message: 'b', timeout: 'PT1H', onError: 'late', next: 'out' },
    out: { kind: 'pass', input: '[steps.first.n, steps.second.n]', next: null },
    late: { kind: 'pass', input: '{ "late": steps.second.error.code }', next: null },
  },
  output: 'steps.out',
});
const OPS = { subject: 'ops', scopes: ['flow:admin'] };

describe('TestRunner messages', () => {
  it('delivers to a parked waitFor step, and the trace replays to the same instance', async () => {
    const flow = await new TestRunner(logic, {}).start({});
    await flow.resume({ step: 'gate', option: 'go', approver: OPS });
    expect(flow.instance.currentStep).toBe('first');
    expect(await flow.send('a', { n: 1 })).toEqual({ status: 'delivered' });
    expect(await flow.send('b', { n: 2 })).toEqual({ status: 'delivered' });
    expect(flow.instance.state).toBe('completed');
    expect(flow.instance.output).toEqual([1, 2]);
    expect(flow.trace.entries.filter((e) => e.event.type === 'message')).toHaveLength(2);
    expect(await replay(logic, flow.trace)).toEqual(flow.instance);
  });

  it('out of order: messages sent before their steps, and in reverse order, are buffered and taken by name', async () => {
    const flow = await new TestRunner(logic, {}).start({});
    expect(await flow.send('b', { n: 2 })).toEqual({ status: 'buffered' });
    expect(await flow.send('a', { n: 1 })).toEqual({ status: 'buffered' });
    expect(await flow.send('a', { n: 5 })).toEqual({ status: 'buffered' });
    expect(flow.buffered.map((m) => m.name)).toEqual(['b', 'a', 'a']);
    await flow.resume({ step: 'gate', option: 'go', approver: OPS });
    // the oldest `a` is taken; the later one stays for a step that never comes
    expect(flow.instance.output).toEqual([1, 2]);
    expect(flow.buffered).toEqual([{ name: 'a', payload: { n: 5 } }]);
    expect(await replay(logic, flow.trace)).toEqual(flow.instance);
  });

  it('a duplicate key is answered with the first answer and is not buffered or delivered again', async () => {
    const flow = await new TestRunner(logic, {}).start({});
    expect(await flow.send('a', { n: 1 }, { key: 'k1' })).toEqual({ status: 'buffered' });
    expect(await flow.send('a', { n: 9 }, { key: 'k1' })).toEqual({ status: 'buffered' });
    expect(flow.buffered).toEqual([{ name: 'a', payload: { n: 1 } }]);
    await flow.resume({ step: 'gate', option: 'go', approver: OPS });
    expect(await flow.send('b', { n: 2 }, { key: 'k2' })).toEqual({ status: 'delivered' });
    expect(await flow.send('b', { n: 3 }, { key: 'k2' })).toEqual({ status: 'delivered' });
    expect(flow.instance.output).toEqual([1, 2]);
  });

  it('refuses as the engine does: unknown name, bad payload, full buffer, ended instance', async () => {
    const flow = await new TestRunner(logic, {}, { maxBufferedMessages: 1 }).start({});
    await expect(flow.send('c', {})).rejects.toMatchObject({ code: 'FLOW_UNKNOWN_MESSAGE' });
    await expect(flow.send('a', { n: 'one' })).rejects.toMatchObject({ code: 'FLOW_MESSAGE_PAYLOAD_INVALID' });
    await flow.send('b', { n: 2 });
    await expect(flow.send('a', { n: 1 })).rejects.toMatchObject({ code: 'FLOW_MESSAGE_BUFFER_FULL' });
    await flow.resume({ step: 'gate', option: 'go', approver: OPS });
    await flow.send('a', { n: 1 });
    expect(flow.instance.state).toBe('completed');
    await expect(flow.send('a', { n: 1 })).rejects.toMatchObject({ code: 'FLOW_INSTANCE_ENDED' });
  });

  it('a timeout on the virtual clock takes onError with FLOW_MESSAGE_TIMEOUT', async () => {
    const flow = await new TestRunner(logic, {}).start({});
    await flow.resume({ step: 'gate', option: 'go', approver: OPS });
    await flow.send('a', { n: 1 });
    await flow.advance(3_600_000);
    expect(flow.instance.output).toBeNull();
    expect(flow.instance.ctx.outputs['late']).toEqual({ late: 'FLOW_MESSAGE_TIMEOUT' });
    expect(await replay(logic, flow.trace)).toEqual(flow.instance);
  });
});
