import { describe, expect, it } from 'vitest';
import type { LogicVersion, StepDef } from '../../contracts/index.ts';
import { type Fake, type FakeCall, fakes, type FlowHandle, replay, TestRunner } from '../../engine/testing/index.ts';
import { makeLogic } from '../contracts/helpers.ts';

/**
 * The migrate verb in the in-process runner (`flow.migrate`), by the engine's rules
 * (docs/versions.md, "Migrating instances"); test/engine/migrate.test.ts holds the engine's side,
 * and test/engine/runner-parity.test.ts runs one migration on both.
 */
const DECIDER = { subject: 'approver@example.com', scopes: ['flow:decide'] };

/** The payments story of docs/versions.md: v1 reserves (with a compensation), waits for approval, charges; v2 adds a fraud check. */
function versions() {
  const reserve: StepDef = { kind: 'proxy', path: '/reserve', compensate: { kind: 'proxy', path: '/release' }, next: 'approval' };
  const charge: StepDef = { kind: 'proxy', path: '/charge', retry: { maxAttempts: 3, initialMs: 1000 } };
  const v = (version: number, steps: Record<string, StepDef>, more: Partial<LogicVersion> = {}) => makeLogic({ logicId: 'runner.migrate', version, start: 'reserve', steps, ...more });
  return {
    v1: v(1, { reserve, approval: { kind: 'decision', options: ['approve'], next: 'charge' }, charge }),
    v2: v(
      2,
      {
        reserve,
        approval: { kind: 'decision', options: ['approve'], next: 'fraud' },
        fraud: { kind: 'proxy', path: '/fraud', next: 'settled' },
        settled: { kind: 'waitFor', message: 'funds.settled', next: 'charge' },
        charge,
      },
      { triggers: [{ event: 'ledger.funds_settled', message: 'funds.settled', match: { correlationId: 'event.payload.paymentId' } }] },
    ),
    /** The compensation of reserve changed. */
    v3: v(3, { reserve: { ...reserve, compensate: { kind: 'proxy', path: '/release-v3' } }, approval: { kind: 'decision', options: ['approve'], next: 'charge' }, charge }),
    /** approval renamed review, charge renamed pay. */
    v4: v(4, { reserve: { ...reserve, next: 'review' }, review: { kind: 'decision', options: ['approve'], next: 'pay' }, pay: charge }),
  };
}
const vs = versions();

/** Every call, by step and idempotency key; the charge answers as `charge` says. */
function service(charge: Fake = fakes.success({ charged: true })) {
  const calls: FakeCall[] = [];
  const seen =
    (f: Fake): Fake =>
    (call) => {
      calls.push(call);
      return f(call);
    };
  return {
    calls,
    keys: (step: string) => calls.filter((c) => c.step === step).map((c) => c.idempotencyKey),
    fakes: {
      'test/reserve': seen(fakes.success({ held: true })),
      'test/release': seen(fakes.success()),
      'test/fraud': seen(fakes.success({ score: 1 })),
      'test/charge': seen(charge),
    },
  };
}

/** A runner that knows every version, and an instance of v1 parked on its approval. */
async function parked(charge?: Fake): Promise<{ runner: TestRunner; flow: FlowHandle; svc: ReturnType<typeof service> }> {
  const svc = service(charge);
  const runner = new TestRunner(vs.v1, svc.fakes, { logics: [vs.v2, vs.v3, vs.v4] });
  const flow = await runner.start({}, { correlationId: 'pay-1' });
  expect(flow.instance).toMatchObject({ state: 'waiting', currentStep: 'approval', version: 1 });
  return { runner, flow, svc };
}

/** What a refused migration must leave as it was. */
const snapshot = (flow: FlowHandle) => structuredClone({ instance: flow.instance, entries: flow.trace.entries.length, logic: flow.logic.hash });

describe('TestRunner migrate', () => {
  it('moves a parked instance to v2, journalled as the engine journals it; it runs v2 on under its keys and the trace replays across the move', async () => {
    const { runner, flow, svc } = await parked();
    const id = flow.instance.id;
    const moved = await flow.migrate(2);
    expect(moved).toMatchObject({ state: 'waiting', currentStep: 'approval', version: 2, logicHash: vs.v2.hash });
    expect(flow.logic).toBe(vs.v2);
    const entry = flow.trace.entries.at(-1)!;
    expect(entry.event).toEqual({ type: 'migrate', from: { version: 1, hash: vs.v1.hash }, to: { version: 2, hash: vs.v2.hash }, renames: {} });
    expect(entry.decision).toMatchObject({ cause: 'verb.migrate', state: 'waiting', currentStep: 'approval', attempts: [], commands: [] });

    await flow.resume({ step: 'approval', option: 'approve', approver: DECIDER });
    expect(flow.instance.currentStep).toBe('settled');
    // v2's message trigger reaches it now that it runs v2
    expect((await runner.event('ledger.funds_settled', { paymentId: 'pay-1' })).delivered).toEqual([{ workflowId: id, message: 'funds.settled', status: 'delivered' }]);
    expect(flow.instance.state).toBe('completed');
    expect([svc.keys('fraud'), svc.keys('charge')]).toEqual([[`${id}:fraud:0`], [`${id}:charge:0`]]);

    expect(await replay(vs.v2, flow.trace, { versions: [vs.v1] })).toEqual(flow.instance);
    await expect(replay(vs.v2, flow.trace)).rejects.toMatchObject({ code: 'FLOW_REPLAY_VERSION_MISSING' });
  });

  it('a rename map moves the instance to the step under its new name; the attempt under way keeps its key, and a later renamed step is keyed by its new name', async () => {
    const { flow, svc } = await parked();
    const id = flow.instance.id;
    await flow.migrate(4, { renames: { approval: 'review', charge: 'pay' } });
    expect(flow.instance).toMatchObject({ version: 4, currentStep: 'review' });
    expect(flow.instance.ctx.running).toMatchObject({ step: 'review', idempotencyKey: `${id}:approval:0` });
    expect(flow.trace.entries.at(-1)?.event).toMatchObject({ type: 'migrate', renames: { approval: 'review', charge: 'pay' } });
    await flow.resume({ step: 'review', option: 'approve', approver: DECIDER });
    expect(flow.instance.state).toBe('completed');
    expect(svc.keys('pay')).toEqual([`${id}:pay:0`]);
    expect(await replay(vs.v4, flow.trace, { versions: [vs.v1] })).toEqual(flow.instance);
  });

  it('a call under way (answered 202) moves with its attempt and key, and its completion lands on v2', async () => {
    const { flow, svc } = await parked(fakes.parked());
    const id = flow.instance.id;
    await flow.resume({ step: 'approval', option: 'approve', approver: DECIDER });
    expect(flow.instance).toMatchObject({ state: 'waiting', currentStep: 'charge' });
    const running = flow.instance.ctx.running;
    await flow.migrate(2);
    expect(flow.instance).toMatchObject({ state: 'waiting', version: 2, currentStep: 'charge' });
    expect(flow.instance.ctx.running).toEqual(running);
    await flow.complete({ status: 'succeeded', output: { charged: true } });
    expect(flow.instance.state).toBe('completed');
    expect(svc.keys('charge')).toEqual([`${id}:charge:0`]);
    expect(await replay(vs.v2, flow.trace, { versions: [vs.v1] })).toEqual(flow.instance);
  });

  it('a parked delay’s timer carries over and fires on v2', async () => {
    const delayed = (version: number, then: StepDef) =>
      makeLogic({ logicId: 'runner.delayed', version, start: 'wait', steps: { wait: { kind: 'delay', duration: 'PT1H', next: 'then' }, then } });
    const v1 = delayed(1, { kind: 'pass', input: '"v1"' });
    const v2 = delayed(2, { kind: 'pass', input: '"v2"' });
    const runner = new TestRunner(v1, {}, { logics: [v2] });
    const flow = await runner.start({});
    const timers = flow.timers;
    expect(timers).toHaveLength(1);
    await flow.advance(30 * 60_000);
    await flow.migrate(2);
    expect(flow.timers).toEqual(timers);
    await flow.advance(30 * 60_000);
    expect([flow.instance.state, flow.instance.output]).toEqual(['completed', 'v2']);
    expect(await replay(v2, flow.trace, { versions: [v1] })).toEqual(flow.instance);
  });

  it('refuses what the engine refuses, with its codes, and changes nothing', async () => {
    const { flow } = await parked();
    const was = snapshot(flow);
    const refusals: [() => Promise<unknown>, string][] = [
      [() => flow.migrate(1), 'FLOW_MIGRATE_BAD_TARGET'],
      [() => flow.migrate(2, { renames: { nope: 'fraud' } }), 'FLOW_MIGRATE_BAD_RENAME'],
      // renamed away, but v2 still has a step of that name
      [() => flow.migrate(2, { renames: { approval: 'fraud' } }), 'FLOW_MIGRATE_BAD_RENAME'],
      // v4 has no step approval: without the map the instance's step is missing there
      [() => flow.migrate(4), 'FLOW_MIGRATE_UNSAFE'],
      // v3 would run another compensation of reserve than the one registered
      [() => flow.migrate(3), 'FLOW_MIGRATE_COMPENSATION'],
      // the migration names v2 → v4, and the instance is on v1
      [() => flow.migrate(4, { fromVersion: 2, renames: { approval: 'review', charge: 'pay' } }), 'FLOW_MIGRATE_WRONG_VERSION'],
    ];
    for (const [move, code] of refusals) {
      await expect(move(), code).rejects.toMatchObject({ code });
      expect(snapshot(flow)).toEqual(was);
    }
    await expect(flow.migrate(9)).rejects.toThrow(/not given runner.migrate@9/);
  });

  it('refuses an ended instance (FLOW_MIGRATE_STATE), one moved already (FLOW_MIGRATE_WRONG_VERSION), and renaming a step whose call is under way (FLOW_MIGRATE_RENAME_IN_FLIGHT)', async () => {
    const ended = (await parked()).flow;
    await ended.resume({ step: 'approval', option: 'approve', approver: DECIDER });
    await expect(ended.migrate(2)).rejects.toMatchObject({ code: 'FLOW_MIGRATE_STATE' });

    const moved = (await parked()).flow;
    await moved.migrate(2);
    await expect(moved.migrate(4, { fromVersion: 1, renames: { approval: 'review', charge: 'pay' } })).rejects.toMatchObject({ code: 'FLOW_MIGRATE_WRONG_VERSION' });

    const calling = (await parked(fakes.parked())).flow;
    await calling.resume({ step: 'approval', option: 'approve', approver: DECIDER });
    const was = snapshot(calling);
    await expect(calling.migrate(4, { renames: { approval: 'review', charge: 'pay' } })).rejects.toMatchObject({ code: 'FLOW_MIGRATE_RENAME_IN_FLIGHT' });
    expect(snapshot(calling)).toEqual(was);
  });

  it('a migrated trace is restored on the version it moved to', async () => {
    const { runner, flow } = await parked();
    await flow.migrate(2);
    const restored = await runner.restore(flow.trace);
    expect(restored.logic).toBe(vs.v2);
    await restored.resume({ step: 'approval', option: 'approve', approver: DECIDER });
    expect(restored.instance.currentStep).toBe('settled');
  });
});
