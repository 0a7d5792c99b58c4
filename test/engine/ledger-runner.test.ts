import { expect, it } from 'vitest';
import { type Fake, type EventSent, replay, TestRunner, unreliableDelivery } from '../../engine/testing/index.ts';
import { payment, paymentsFakes, paymentsV3 } from '../support/payments.ts';

/**
 * The examples' payments.capture@3 in the in-process runner, with the ledger as an unreliable
 * channel: its `ledger.funds_settled` events arrive shuffled and some twice
 * (`unreliableDelivery`), some before their payment reaches its `settled` step. Whatever the
 * order, each payment takes its own settlement once and is captured once, and every trace replays.
 */
const APPROVER = { subject: 'approver@example.com', scopes: ['flow:decide', 'payments:approve'] };
const SEEDS = 25;

/** The risk module's verdict, as the real one gives it for these accounts (test/engine/runner-parity.test.ts runs the module itself). */
const risk: Fake = (call) => {
  const risky = (call.input as { accountId: string }).accountId === 'acct-risky';
  return { status: 'succeeded', output: { score: risky ? 60 : 0, needsApproval: risky, reason: risky ? 'chargebacks on record' : 'clean history' } };
};

it('ledger events in any order, some twice, settle each payment once: its own settlement, one capture, a trace that replays', async () => {
  const reach = { reordered: 0, repeated: 0, early: 0 };
  for (let seed = 1; seed <= SEEDS; seed++) {
    const calls: { path: string; key: string; body: unknown }[] = [];
    const runner = new TestRunner(paymentsV3, { ...paymentsFakes(calls), 'func:risk': risk });
    const flows = [];
    for (let i = 0; i < 4; i++) flows.push(await runner.start(payment(`pay-${i}`, i === 0 ? 'acct-risky' : 'acct-1', 'ledger')));
    const immediate = await runner.start(payment('pay-now', 'acct-1'));
    // pay-0 waits for an approver first: its settlement, if it comes before, waits for its step
    expect(flows.map((f) => f.instance.currentStep)).toEqual(['approval', 'settled', 'settled', 'settled']);
    expect(immediate.instance.currentStep).toBe('notify');

    const events = [...flows.keys(), 9].map((i) => ({ key: `ledger-${i}`, payload: { paymentId: `pay-${i}`, ledgerRef: `L-${i}`, amount: 100 + i } }));
    const order = unreliableDelivery(events, { seed });
    // reordered: the first deliveries are not in the order the ledger sent them
    if (order.filter((e, i) => order.indexOf(e) === i).some((e, i) => e !== events[i])) reach.reordered++;
    if (order.length > events.length) reach.repeated++;
    const first = new Map<string, EventSent>();
    let approved = false;
    for (const [n, e] of order.entries()) {
      // the approver answers halfway through the ledger's events
      if (n === Math.floor(order.length / 2)) {
        await flows[0]!.resume({ step: 'approval', option: 'approve', approver: APPROVER });
        approved = true;
      }
      const answer = await runner.event('ledger.funds_settled', e.payload, { key: e.key });
      const earlier = first.get(e.key);
      if (earlier !== undefined) {
        expect(answer).toEqual({ ...earlier, created: false });
        continue;
      }
      first.set(e.key, answer);
      const i = Number(e.key.slice('ledger-'.length));
      // pay-0 before its approval has not reached the step: its settlement waits there
      const status = i === 0 && !approved ? 'buffered' : 'delivered';
      expect(answer.delivered).toEqual(i === 9 ? [] : [{ workflowId: flows[i]!.instance.id, message: 'funds.settled', status }]);
      if (status === 'buffered') reach.early++;
    }

    for (const [i, f] of flows.entries()) {
      expect([f.instance.state, f.instance.error]).toEqual(['completed', null]);
      expect(f.instance.ctx.outputs['settled']).toEqual({ ledgerRef: `L-${i}`, amount: 100 + i });
      expect(await replay(paymentsV3, f.trace)).toEqual(f.instance);
    }
    const captures = calls.filter((c) => c.path === '/funds/capture').map((c) => (c.body as { paymentId: string }).paymentId);
    expect(captures.sort()).toEqual(['pay-0', 'pay-1', 'pay-2', 'pay-3', 'pay-now']);
  }
  // the orders reached the cases that matter
  expect(reach.reordered).toBeGreaterThan(SEEDS / 2);
  expect(reach.repeated).toBe(SEEDS);
  expect(reach.early).toBeGreaterThan(0);
});
