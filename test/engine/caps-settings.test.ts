import { expect, it } from 'vitest';
import { engineOptionsFrom, loadConfig } from '../../engine/config.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import type { StepDef } from '../../contracts/index.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { OPERATOR, settle } from '../support/engine.ts';

const ENV = 'test-env';

/** Routed by choice to one of two decisions, then a call: instances parked at `askA` and `askB` are two groups. */
const STEPS: Record<string, StepDef> = {
  route: { kind: 'choice', branches: [{ when: 'input.a = true', next: 'askA' }], otherwise: 'askB' },
  askA: { kind: 'decision', options: ['ok'], next: 'charge' },
  askB: { kind: 'decision', options: ['ok'], next: 'charge' },
  charge: { kind: 'proxy', path: '/charge' },
};
const v1 = makeLogic({ logicId: 'caps.pay', version: 1, domain: 'caps', start: 'route', steps: STEPS });
const v2 = makeLogic({ logicId: 'caps.pay', version: 2, domain: 'caps', start: 'route', steps: STEPS });

/** Waits for `funds.settled`, which a `ledger.settled` event delivers to every instance of its correlationId. */
const settling = makeLogic({
  logicId: 'caps.settle',
  domain: 'caps',
  start: 'settled',
  steps: { settled: { kind: 'waitFor', message: 'funds.settled' } },
  triggers: [{ event: 'ledger.settled', message: 'funds.settled', match: { correlationId: 'event.payload.paymentId' } }],
});

/** An engine configured as `s8flow start` configures one: from FLOW_* variables, through engineOptionsFrom. */
const engineWith = (db: Parameters<typeof engineOptionsFrom>[1], vars: Record<string, string>) => new Engine(engineOptionsFrom(loadConfig({ FLOW_ENV: ENV, ...vars }), db));

it('the caps default to 1000 instances per trigger, 500 compatibility groups and 2000 usage groups, and refuse a bad value naming it', () => {
  expect(loadConfig({}).caps).toEqual({ maxRoutedInstances: 1000, maxCompatGroups: 500, maxUsageGroups: 2000 });
  expect(loadConfig({ FLOW_TRIGGER_REACH_MAX: '7', FLOW_COMPAT_GROUPS_MAX: '8', FLOW_USAGE_GROUPS_MAX: '9' }).caps).toEqual({
    maxRoutedInstances: 7,
    maxCompatGroups: 8,
    maxUsageGroups: 9,
  });
  for (const [name, value] of [
    ['FLOW_TRIGGER_REACH_MAX', '0'],
    ['FLOW_TRIGGER_REACH_MAX', 'lots'],
    ['FLOW_COMPAT_GROUPS_MAX', '1.5'],
    ['FLOW_COMPAT_GROUPS_MAX', '-3'],
    ['FLOW_USAGE_GROUPS_MAX', '1e9'],
  ] as const) {
    expect(() => loadConfig({ [name]: value })).toThrow(expect.objectContaining({ code: 'FLOW_CONFIG_INVALID', message: expect.stringMatching(new RegExp(`^${name}: `)) }));
  }
});

describeEachDriver('caps read from the settings', (getDb) => {
  it('FLOW_TRIGGER_REACH_MAX=2: an event whose trigger would reach three instances is refused, delivering nothing; two are reached', async () => {
    const engine = engineWith(getDb(), { FLOW_TRIGGER_REACH_MAX: '2' });
    await engine.publish(settling, ENV);
    const three: string[] = [];
    for (let i = 0; i < 3; i++) three.push((await engine.start({ logicId: 'caps.settle', input: {}, correlationId: 'pay-3', env: ENV })).id);
    const two: string[] = [];
    for (let i = 0; i < 2; i++) two.push((await engine.start({ logicId: 'caps.settle', input: {}, correlationId: 'pay-2', env: ENV })).id);
    await settle(engine);

    await expect(engine.ingestEvent({ type: 'ledger.settled', idempotencyKey: 'l-3', env: ENV, payload: { paymentId: 'pay-3' } })).rejects.toMatchObject({
      code: 'FLOW_TRIGGER_ROUTE_INVALID',
      message: expect.stringContaining('more than 2 live instances'),
    });
    for (const id of three) expect((await engine.get(id, ENV)).state).toBe('waiting');

    const reached = await engine.ingestEvent({ type: 'ledger.settled', idempotencyKey: 'l-2', env: ENV, payload: { paymentId: 'pay-2' } });
    expect(reached.delivered.map((d) => d.workflowId).sort()).toEqual([...two].sort());
    await settle(engine);
    for (const id of two) expect((await engine.get(id, ENV)).state).toBe('completed');
    // the usage report below counts every live instance of the env
    for (const id of three) await engine.ops.cancel(id, { reason: 'test done' }, { ...OPERATOR, env: ENV });
    await engine.close();
  });

  it('FLOW_COMPAT_GROUPS_MAX=1 and FLOW_USAGE_GROUPS_MAX=1: two groups of live instances, one looked at, the report truncated and the rest ungrouped', async () => {
    const engine = engineWith(getDb(), { FLOW_COMPAT_GROUPS_MAX: '1', FLOW_USAGE_GROUPS_MAX: '1' });
    await engine.publish(v1, ENV);
    for (const a of [true, true, false]) await engine.start({ logicId: 'caps.pay', version: 1, input: { a }, env: ENV });
    await settle(engine);

    // the same steps: every group is safe, so only the cap makes the verdict unsafe
    const report = await engine.compatibility(ENV, 'caps.pay', v2, 1);
    expect(report.live).toBe(3);
    expect(report.groups.map((g) => [g.currentStep, g.count, g.verdict])).toEqual([['askA', 2, 'safe']]);
    expect(report.truncated).toBe(true);
    expect(report.verdict).toBe('unsafe');

    const usage = await engine.handlerUsage(ENV);
    const charge = usage.items.find((h) => h.handler === 'caps')?.paths.find((p) => p.path === '/charge');
    expect(charge?.versions[0]?.groups.map((g) => [g.currentStep, g.count, g.reach])).toEqual([
      ['askA', 2, 'ahead'],
      [null, 1, 'ungrouped'],
    ]);
    await engine.close();
  });
});
