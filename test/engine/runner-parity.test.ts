import { afterAll, beforeAll, expect, it } from 'vitest';
import { canonicalJson } from '../../contracts/index.ts';
import { createFuncRuntime, type FuncRuntime } from '../../host-functions/index.ts';
import { artifactModules } from '../../engine/runtime/artifacts.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { exportTrace, type FlowHandle, replay, TestRunner, type Trace, unreliableDelivery } from '../../engine/testing/index.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle } from '../support/engine.ts';
import type { FakeService } from '../support/fake-service.ts';
import { COMPILED, payment, paymentsFakes, paymentsService, paymentsV2, paymentsV3 } from '../support/payments.ts';

/**
 * One story on the real engine and on the in-process runner, compared: the examples'
 * payments.capture@3 settled by the ledger's `ledger.funds_settled` events through its message
 * trigger, delivered in an unreliable order with repeats, and an @2 payment migrated to @3. Both
 * run the real risk module and an owning service that answers alike, the runner's instances take
 * the engine's ids, and every answer, every ending and every decision must be the same.
 */
const ENV = 'parity';
const OPS = { subject: 'ops@example.com', scopes: ['flow:admin'] };
const APPROVER = { subject: 'approver@example.com', scopes: ['flow:decide', 'payments:approve'] };

/** What the core decided for the instance, in order. */
const decisions = (trace: Trace) => canonicalJson(trace.entries.flatMap((e) => (e.decision === null ? [] : [e.decision])));

describeEachDriver('the runner decides as the engine: payments.capture@3', (getDb) => {
  let svc: FakeService;
  let runtime: FuncRuntime;
  let engine: Engine;
  beforeAll(async () => {
    svc = await paymentsService();
    const modules = await artifactModules(COMPILED, paymentsV3);
    runtime = createFuncRuntime({ loadModule: async (hash) => modules[hash]! });
    engine = new Engine({ db: getDb(), env: ENV, executors: { handlers: new Map([['PAYMENTS', { url: svc.url }]]) } });
    for (const doc of [paymentsV2, paymentsV3]) await engine.publishVersion(ENV, doc, await artifactModules(COMPILED, doc));
  }, 60_000);
  afterAll(async () => {
    await runtime?.close();
    await svc?.close();
  });

  /** Starts `input` on the engine (pinned to `version`), then the same instance, by id, in the runner. */
  async function startBoth(runner: TestRunner, version: number, input: Record<string, unknown>): Promise<FlowHandle> {
    const { id } = await engine.start({ logicId: 'payments.capture', version, input, env: ENV });
    await settle(engine);
    return runner.start(input, { id, env: ENV });
  }

  /** The same ending and the same decisions, and the engine's trace replays. */
  async function expectSame(flow: FlowHandle, versions = [paymentsV2]): Promise<void> {
    const id = flow.instance.id;
    const record = await engine.get(id, ENV);
    expect([record.state, record.version, record.currentStep, record.output, record.error]).toEqual([
      flow.instance.state,
      flow.instance.version,
      flow.instance.currentStep,
      flow.instance.output,
      flow.instance.error,
    ]);
    const trace = await exportTrace(engine, ENV, id);
    expect(decisions(trace), `decisions of ${id}`).toBe(decisions(flow.trace));
    expect((await replay(paymentsV3, trace, { versions })).state).toBe(record.state);
  }

  it('ledger events in an unreliable order, some twice, some before their step: the same answers, endings and decisions', async () => {
    const runner = new TestRunner(paymentsV3, paymentsFakes(), { funcRuntime: runtime });
    const flows = [await startBoth(runner, 3, payment('pay-r', 'acct-risky', 'ledger'))];
    for (const p of ['pay-a', 'pay-b']) flows.push(await startBoth(runner, 3, payment(p, 'acct-1', 'ledger')));
    expect(flows.map((f) => f.instance.currentStep)).toEqual(['approval', 'settled', 'settled']);

    const events = ['pay-r', 'pay-a', 'pay-b', 'pay-x'].map((p, i) => ({ key: `ledger-${p}`, payload: { paymentId: p, ledgerRef: `L-${i}`, amount: 120 } }));
    const order = unreliableDelivery(events, { seed: 7, repeats: 3 });
    // the risky payment's settlement comes before its approval: it waits for its step
    order.splice(order.indexOf(events[0]!), 1);
    order.unshift(events[0]!);
    for (const [n, e] of order.entries()) {
      if (n === 2) {
        await engine.resume(flows[0]!.instance.id, { step: 'approval', option: 'approve', approver: APPROVER }, { env: ENV });
        await settle(engine);
        await flows[0]!.resume({ step: 'approval', option: 'approve', approver: APPROVER });
      }
      const onEngine = await engine.ingestEvent({ type: 'ledger.funds_settled', idempotencyKey: e.key, payload: e.payload, env: ENV });
      await settle(engine);
      const inRunner = await runner.event('ledger.funds_settled', e.payload, { key: e.key, env: ENV });
      expect(inRunner, `event ${n} (${e.key})`).toEqual(onEngine);
    }
    for (const flow of flows) {
      expect(flow.instance.state).toBe('completed');
      await expectSame(flow);
    }
  });

  it('an @2 payment parked on its approval, migrated to @3: the same move, the same run on @3, the same refusal of a second move', async () => {
    const runner = new TestRunner(paymentsV2, paymentsFakes(), { logics: [paymentsV3], funcRuntime: runtime });
    const flow = await startBoth(runner, 2, payment('pay-m', 'acct-risky'));
    const id = flow.instance.id;
    expect(flow.instance).toMatchObject({ state: 'waiting', currentStep: 'approval', version: 2 });

    const move = { logicId: 'payments.capture', fromVersion: 2, toVersion: 3, renames: {} };
    const moved = await engine.ops.migrations.apply(id, move, { actor: OPS, reason: 'fraud check', env: ENV });
    await flow.migrate(3);
    expect([moved.version, moved.currentStep, moved.state]).toEqual([flow.instance.version, flow.instance.currentStep, flow.instance.state]);
    const refusal = engine.ops.migrations.apply(id, move, { actor: OPS, env: ENV });
    await expect(refusal).rejects.toMatchObject({ code: 'FLOW_MIGRATE_WRONG_VERSION' });
    await expect(flow.migrate(3, { fromVersion: 2 })).rejects.toMatchObject({ code: 'FLOW_MIGRATE_WRONG_VERSION' });

    await engine.resume(id, { step: 'approval', option: 'approve', approver: APPROVER }, { env: ENV });
    await settle(engine);
    await flow.resume({ step: 'approval', option: 'approve', approver: APPROVER });
    expect(flow.instance).toMatchObject({ state: 'completed', output: { paymentId: 'pay-m', fraudCheckId: 'frd-pay-m' } });
    await expectSame(flow);
    expect(svc.calls('/fraud/check').filter((r) => r.headers['idempotency-key'] === `${id}:fraudCheck:0`)).toHaveLength(1);
  });
});
