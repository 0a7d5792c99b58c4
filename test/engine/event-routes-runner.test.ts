import { describe, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import { DEFAULT_MAX_ROUTED_INSTANCES } from '../../engine/core/event-routes.ts';
import { type Fake, fakes, replay, TestRunner } from '../../engine/testing/index.ts';
import { makeLogic } from '../contracts/helpers.ts';

/**
 * Events posted to the in-process runner (`runner.event`) start and reach its instances by the
 * engine's rules (docs/messages.md, "From an event"); test/engine/event-routes.test.ts holds the
 * engine's side, and test/engine/runner-parity.test.ts runs one story on both.
 */
const SETTLED = { type: 'object', properties: { amount: { type: 'number' } }, required: ['amount'] };
const TYPE = 'ledger.funds_settled';
const OPS = { subject: 'ops', scopes: ['flow:admin'] };

type Match = { correlationId: string } | { attribute: string; value: string };
const routeOn = (match: Match = { correlationId: 'event.payload.paymentId' }) => ({
  event: TYPE,
  message: 'funds.settled',
  match,
  payload: '{ "amount": event.payload.amount }',
});

/** Waits for funds.settled (behind a decision when `gated`), then captures the settled amount. */
function payments(o: { gated?: boolean; version?: number; triggers?: LogicVersion['triggers']; attributes?: LogicVersion['attributes'] } = {}): LogicVersion {
  return makeLogic({
    logicId: 'runner.payments',
    version: o.version ?? 1,
    start: o.gated === true ? 'gate' : 'settled',
    steps: {
      ...(o.gated === true ? { gate: { kind: 'decision' as const, options: ['go'], next: 'settled' } } : {}),
      settled: { kind: 'waitFor', message: 'funds.settled', schema: SETTLED, next: 'capture' },
      capture: { kind: 'proxy', path: '/capture', input: '{ "amount": steps.settled.amount }' },
    },
    triggers: o.triggers ?? [routeOn()],
    ...(o.attributes === undefined ? {} : { attributes: o.attributes }),
  });
}

/** The capture fake, and the amounts it was called with. */
function capture(): { fakes: Record<string, Fake>; amounts: number[] } {
  const amounts: number[] = [];
  const fake: Fake = (call) => {
    amounts.push((call.input as { amount: number }).amount);
    return { status: 'succeeded', output: { captured: true } };
  };
  return { amounts, fakes: { 'test/capture': fake } };
}

describe('TestRunner events routed to waiting instances', () => {
  it('routes an event to the live instance whose correlationId matches, not another, not another env’s, not an ended one', async () => {
    const logic = payments();
    const cap = capture();
    const runner = new TestRunner(logic, cap.fakes);
    const mine = await runner.start({}, { correlationId: 'pay-1' });
    const other = await runner.start({}, { correlationId: 'pay-2' });
    const elsewhere = await runner.start({}, { correlationId: 'pay-1', env: 'other' });

    const result = await runner.event(TYPE, { paymentId: 'pay-1', amount: 1250 }, { key: 'ledger-1' });
    expect(result).toEqual({ ids: [], delivered: [{ workflowId: mine.instance.id, message: 'funds.settled', status: 'delivered' }], created: true, matched: true });
    expect(mine.instance.state).toBe('completed');
    expect(mine.instance.ctx.outputs['settled']).toEqual({ amount: 1250 });
    expect(cap.amounts).toEqual([1250]);
    for (const f of [other, elsewhere]) expect([f.instance.state, f.buffered]).toEqual(['waiting', []]);
    expect(await replay(logic, mine.trace)).toEqual(mine.instance);

    // pay-1 has ended: a second settlement reaches no instance, and an event naming none is matched by nothing
    expect(await runner.event(TYPE, { paymentId: 'pay-1', amount: 1 })).toEqual({ ids: [], delivered: [], created: true, matched: false });
    expect(await runner.event(TYPE, { paymentId: 'pay-9', amount: 1 })).toMatchObject({ delivered: [], matched: false });
    expect(runner.flow(mine.instance.id)).toBe(mine);
  });

  it('routes by a search attribute, compared as the attribute is typed', async () => {
    const logic = payments({
      attributes: { order: { type: 'number', value: 'input.order' } },
      triggers: [routeOn({ attribute: 'order', value: 'event.payload.order' })],
    });
    const runner = new TestRunner(logic, capture().fakes);
    const mine = await runner.start({ order: 77 });
    const other = await runner.start({ order: 78 });
    // a declared number attribute is not met by text
    await expect(runner.event(TYPE, { order: '77', amount: 3 })).rejects.toMatchObject({ code: 'FLOW_TRIGGER_ROUTE_INVALID' });
    const result = await runner.event(TYPE, { order: 77, amount: 3 });
    expect(result.delivered).toEqual([{ workflowId: mine.instance.id, message: 'funds.settled', status: 'delivered' }]);
    expect([mine.instance.state, other.instance.state]).toEqual(['completed', 'waiting']);
  });

  it('an undeclared attribute matches only a value of the same type', async () => {
    const logic = payments({
      attributes: { order: { value: 'input.order' } },
      triggers: [routeOn({ attribute: 'order', value: 'event.payload.order' })],
    });
    const runner = new TestRunner(logic, capture().fakes);
    const text = await runner.start({ order: '77' });
    const number = await runner.start({ order: 77 });
    expect((await runner.event(TYPE, { order: 77, amount: 3 })).delivered.map((d) => d.workflowId)).toEqual([number.instance.id]);
    expect((await runner.event(TYPE, { order: '77', amount: 4 })).delivered.map((d) => d.workflowId)).toEqual([text.instance.id]);
  });

  it('reaches the instances of every version with the trigger, each by its own version’s trigger, in id order', async () => {
    const v1 = payments();
    const v2 = payments({ version: 2, triggers: [routeOn({ correlationId: 'event.payload.ref' })] });
    // an instance of v1 waiting in another runner, picked up here (its id never reached otherwise)
    const elsewhere = new TestRunner(v1, {});
    const old = await elsewhere.start({}, { correlationId: 'pay-10' });
    const runner = new TestRunner(v2, capture().fakes, { logics: [v1] });
    const mine = await runner.restore(old.trace);
    const ids = ['00000000-0000-4000-8000-000000000002', '00000000-0000-4000-8000-000000000001'];
    for (const id of ids) await runner.start({}, { correlationId: 'pay-10', id });

    // v1's trigger reads paymentId, v2's reads ref
    const first = await runner.event(TYPE, { paymentId: 'pay-10', ref: 'pay-11', amount: 10 });
    expect(first.delivered.map((d) => d.workflowId)).toEqual([mine.instance.id]);
    const second = await runner.event(TYPE, { paymentId: 'pay-x', ref: 'pay-10', amount: 11 });
    expect(second.delivered.map((d) => d.workflowId)).toEqual([...ids].sort());
  });

  it('a redelivered event delivers nothing again: its key answers the first outcome, and each instance holds the message key event:<key>:<message>', async () => {
    const logic = payments({ gated: true });
    const cap = capture();
    const runner = new TestRunner(logic, cap.fakes);
    const flow = await runner.start({}, { correlationId: 'pay-3' });

    const first = await runner.event(TYPE, { paymentId: 'pay-3', amount: 30 }, { key: 'ledger-3' });
    expect(first.delivered).toEqual([{ workflowId: flow.instance.id, message: 'funds.settled', status: 'buffered' }]);
    expect(await runner.event(TYPE, { paymentId: 'pay-3', amount: 30 }, { key: 'ledger-3' })).toEqual({ ...first, created: false });
    // the same key in another env is another event
    expect(await runner.event(TYPE, { paymentId: 'pay-3', amount: 30 }, { key: 'ledger-3', env: 'other' })).toMatchObject({ created: true, matched: false });
    // the message as the instance keyed it: a repeat, answered as the first and buffered once
    expect(await flow.send('funds.settled', { amount: 99 }, { key: 'event:ledger-3:funds.settled' })).toEqual({ status: 'buffered' });
    expect(flow.buffered).toEqual([{ name: 'funds.settled', payload: { amount: 30 } }]);

    await flow.resume({ step: 'gate', option: 'go', approver: OPS });
    expect(flow.instance.state).toBe('completed');
    expect(cap.amounts).toEqual([30]);
  });

  it('a key reused by another event is refused with FLOW_EVENT_KEY_REUSED', async () => {
    const runner = new TestRunner(payments(), capture().fakes);
    await runner.start({}, { correlationId: 'pay-4' });
    await runner.event(TYPE, { paymentId: 'pay-4', amount: 40 }, { key: 'ledger-4' });
    await expect(runner.event(TYPE, { paymentId: 'pay-4', amount: 41 }, { key: 'ledger-4' })).rejects.toMatchObject({ code: 'FLOW_EVENT_KEY_REUSED', status: 409 });
    await expect(runner.event('ledger.other', { paymentId: 'pay-4', amount: 40 }, { key: 'ledger-4' })).rejects.toMatchObject({ code: 'FLOW_EVENT_KEY_REUSED' });
  });

  it('a full buffer refuses that instance with its code and the event still reaches the others', async () => {
    const runner = new TestRunner(payments({ gated: true }), capture().fakes, { maxBufferedMessages: 2 });
    const full = await runner.start({}, { correlationId: 'pay-5' });
    const roomy = await runner.start({}, { correlationId: 'pay-5' });
    for (const key of ['a', 'b']) await full.send('funds.settled', { amount: 0 }, { key });
    const result = await runner.event(TYPE, { paymentId: 'pay-5', amount: 50 });
    expect(result.delivered).toEqual(
      [
        { workflowId: full.instance.id, message: 'funds.settled', status: 'refused', code: 'FLOW_MESSAGE_BUFFER_FULL' },
        { workflowId: roomy.instance.id, message: 'funds.settled', status: 'buffered' },
      ].sort((a, b) => (a.workflowId < b.workflowId ? -1 : 1)),
    );
    expect(roomy.buffered).toEqual([{ name: 'funds.settled', payload: { amount: 50 } }]);
  });

  it('a payload the waitFor step refuses refuses the whole event, before anything starts or is delivered, and records nothing', async () => {
    const routed = payments();
    // another definition, earlier in logicId order, that the same event starts
    const audit = makeLogic({ logicId: 'a.audit', start: 'log', steps: { log: { kind: 'proxy', path: '/audit' } }, triggers: [{ event: TYPE, input: 'event.payload' }] });
    let audited = 0;
    const runner = new TestRunner(routed, { ...capture().fakes, 'test/audit': fakes.success(() => ++audited) }, { logics: [audit] });
    const flow = await runner.start({}, { correlationId: 'pay-6' });
    const before = flow.trace.entries.length;
    await expect(runner.event(TYPE, { paymentId: 'pay-6', amount: 'lots' }, { key: 'ledger-6' })).rejects.toMatchObject({ code: 'FLOW_TRIGGER_ROUTE_INVALID', status: 422 });
    expect([audited, flow.trace.entries.length, flow.buffered]).toEqual([0, before, []]);
    // not recorded: the same key with a good payload goes through, and starts the audit once
    const ok = await runner.event(TYPE, { paymentId: 'pay-6', amount: 6 }, { key: 'ledger-6' });
    expect([ok.ids.length, ok.delivered.length, audited]).toEqual([1, 1, 1]);
    expect(flow.instance.state).toBe('completed');
  });

  it('a match or payload a trigger built that cannot be stored refuses the event; so does a payload the engine would not take', async () => {
    const nul = payments({ triggers: [{ ...routeOn(), payload: '{ "amount": 1, "note": $decodeUrl("a%00b") }' }] });
    const runner = new TestRunner(nul, capture().fakes);
    await runner.start({}, { correlationId: 'pay-8' });
    await expect(runner.event(TYPE, { paymentId: 'pay-8', amount: 8 })).rejects.toMatchObject({ code: 'FLOW_TRIGGER_ROUTE_INVALID' });
    const matchNul = payments({ triggers: [routeOn({ correlationId: '$decodeUrl("pay%00-9")' })] });
    await expect(new TestRunner(matchNul, {}).event(TYPE, { amount: 9 })).rejects.toMatchObject({ code: 'FLOW_TRIGGER_ROUTE_INVALID' });
    await expect(runner.event(TYPE, { paymentId: 'pay\u0000', amount: 8 })).rejects.toMatchObject({ code: 'FLOW_INPUT_UNSTORABLE', status: 422 });
    await expect(new TestRunner(nul, {}, { maxInputBytes: 1024 }).event(TYPE, { pad: 'x'.repeat(2000) })).rejects.toMatchObject({ code: 'FLOW_INPUT_TOO_LARGE' });
  });

  it(`one route reaches at most ${DEFAULT_MAX_ROUTED_INSTANCES} live instances: beyond, the event is refused before any is reached`, async () => {
    const runner = new TestRunner(payments(), capture().fakes);
    const flows = [];
    for (let i = 0; i <= DEFAULT_MAX_ROUTED_INSTANCES; i++) flows.push(await runner.start({}, { correlationId: 'everyone' }));
    await expect(runner.event(TYPE, { paymentId: 'everyone', amount: 1 })).rejects.toMatchObject({ code: 'FLOW_TRIGGER_ROUTE_INVALID' });
    expect(flows.filter((f) => f.instance.state !== 'waiting' || f.buffered.length > 0)).toEqual([]);
    await flows[0]!.send('funds.settled', { amount: 1 });
    expect((await runner.event(TYPE, { paymentId: 'everyone', amount: 2 })).delivered).toHaveLength(DEFAULT_MAX_ROUTED_INSTANCES);
  });
});

describe('TestRunner events that start instances', () => {
  const enrol = (version: number, input = '{ "accountId": event.payload.accountId }') =>
    makeLogic({
      logicId: 'runner.enrol',
      version,
      input: { type: 'object', properties: { accountId: { type: 'string' } }, required: ['accountId'] },
      start: 'enrol',
      steps: { enrol: { kind: 'proxy', path: '/enrol', input: `{ "accountId": input.accountId, "v": ${version} }` } },
      triggers: [{ event: 'account.opened', input }],
    });

  it('starts one instance of the highest version given, with the trigger’s input, once per key', async () => {
    const calls: unknown[] = [];
    const enrolled: Fake = (call) => {
      calls.push(call.input);
      return { status: 'succeeded', output: { ok: true } };
    };
    const runner = new TestRunner(enrol(1), { 'test/enrol': enrolled }, { logics: [enrol(2)] });
    const first = await runner.event('account.opened', { accountId: 'acc-1' }, { key: 'acc-1', env: 'eu' });
    expect(first).toMatchObject({ delivered: [], created: true, matched: true });
    expect(first.ids).toHaveLength(1);
    const flow = runner.flow(first.ids[0]!)!;
    expect(flow.instance).toMatchObject({ version: 2, env: 'eu', state: 'completed', input: { accountId: 'acc-1' }, correlationId: null });
    expect(await runner.event('account.opened', { accountId: 'acc-1' }, { key: 'acc-1', env: 'eu' })).toEqual({ ...first, created: false });
    expect(calls).toEqual([{ accountId: 'acc-1', v: 2 }]);
    expect(await replay(enrol(2), flow.trace)).toEqual(flow.instance);
  });

  it('an input the version’s schema refuses, or a failing trigger expression, starts nothing: FLOW_TRIGGER_INPUT_INVALID', async () => {
    const runner = new TestRunner(enrol(1), { 'test/enrol': fakes.success() });
    await expect(runner.event('account.opened', { accountId: 7 }, { key: 'k' })).rejects.toMatchObject({ code: 'FLOW_TRIGGER_INPUT_INVALID', status: 422 });
    const failing = new TestRunner(enrol(1, '$error("no")'), {});
    await expect(failing.event('account.opened', {})).rejects.toMatchObject({ code: 'FLOW_TRIGGER_INPUT_INVALID' });
    // nothing recorded: the key is free for the corrected event
    expect((await runner.event('account.opened', { accountId: 'acc-7' }, { key: 'k' })).ids).toHaveLength(1);
  });
});
