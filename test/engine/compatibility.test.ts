import { afterAll, beforeAll, expect, it } from 'vitest';
import type { CompatibilityReport } from '../../contracts/api/compatibility.ts';
import type { LogicVersion, StepDef } from '../../contracts/index.ts';
import type { Engine } from '../../engine/runtime/engine.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { bearer, testApi } from '../api/support.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle, testEngine } from '../support/engine.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { FakeService } from '../support/fake-service.ts';

const ENV = 'test-env';
const LOGIC = 'compat.pay';

/**
 * v1: a slow payment reserves (undone by /release), waits for an approval, then charges; a fast
 * one charges at once. Three slow instances wait at `approve` holding reserve's output and
 * compensation; two fast ones are about to charge, holding only the route's output.
 */
const V1_STEPS: Record<string, StepDef> = {
  route: { kind: 'choice', branches: [{ when: 'input.fast = true', next: 'charge' }], otherwise: 'reserve' },
  reserve: {
    kind: 'proxy',
    handler: 'test',
    path: '/reserve',
    compensate: { kind: 'proxy', handler: 'test', path: '/release' },
    output: { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] },
    next: 'approve',
  },
  approve: { kind: 'decision', options: ['ok'], next: 'charge' },
  charge: { kind: 'proxy', handler: 'test', path: '/charge', input: '{ "res": steps.reserve.id }' },
};
const v1 = makeLogic({ logicId: LOGIC, version: 1, start: 'route', steps: V1_STEPS });
const candidate = (steps: Record<string, StepDef>, version = 2): LogicVersion => makeLogic({ logicId: LOGIC, version, start: 'route', steps });

describeEachDriver('compatibility report', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  const slow: string[] = [];
  const fast: string[] = [];
  let declined = '';
  beforeAll(async () => {
    svc = await new FakeService()
      .on('/reserve', () => ({ status: 200, body: { id: 'res-1' } }))
      .on('/charge', () => ({ status: 422, body: { message: 'card declined' } }))
      .listen();
    engine = testEngine(getDb(), svc);
    await engine.publish(v1, ENV);
    // one fast payment runs to its end: the charge is declined and nothing is compensated (failed)
    declined = (await engine.start({ logicId: LOGIC, input: { fast: true }, env: ENV })).id;
    for (let i = 0; i < 3; i++) slow.push((await engine.start({ logicId: LOGIC, input: { fast: false }, env: ENV })).id);
    await settle(engine);
    // no settling after these: they stay pending at charge, its attempt prepared
    for (let i = 0; i < 2; i++) fast.push((await engine.start({ logicId: LOGIC, input: { fast: true }, env: ENV })).id);
  });
  afterAll(async () => {
    await engine.close();
    await svc.close();
  });

  const groupAt = (r: CompatibilityReport, step: string) => r.groups.find((g) => g.currentStep === step)!;

  it('groups the live instances by shape, with counts, and calls a step added after where they are safe', async () => {
    const report = await engine.compatibility(ENV, LOGIC, candidate({ ...V1_STEPS, charge: { ...V1_STEPS['charge']!, next: 'audit' } as StepDef, audit: { kind: 'pass' } }));
    expect(report.against).toEqual({ version: 1, hash: v1.hash });
    expect(report.verdict).toBe('safe');
    expect(report.live).toBe(5);
    expect(report.unsafe).toBe(0);
    expect(report.truncated).toBe(false);
    expect(report.groups.map((g) => [g.state, g.currentStep, g.count, g.verdict])).toEqual([
      ['waiting', 'approve', 3, 'safe'],
      ['pending', 'charge', 2, 'safe'],
    ]);
    const waiting = groupAt(report, 'approve');
    expect(waiting.outputs).toEqual(['reserve', 'route']);
    expect(waiting.compensations).toEqual(['reserve']);
    expect(slow).toContain(waiting.representative);
    expect(groupAt(report, 'charge')).toMatchObject({ outputs: ['route'], compensations: [], running: 'step' });
    expect(fast).toContain(groupAt(report, 'charge').representative);
    // what would run next: the approval answered with its first option, charge calls out under its key, then the new step
    expect(waiting.next?.steps.map((s) => [s.step, s.callsOut, s.idempotencyKey])).toEqual([
      ['charge', true, `${waiting.representative}:charge:0`],
      ['audit', false, null],
    ]);
    expect(waiting.next?.stopsAt).toEqual({ state: 'completed', step: 'audit' });
    expect(waiting.next?.assumes).toBe('decision approve = ok');
    // the fast ones' charge never answered and has no schema: answered null, it runs on to the end
    expect(groupAt(report, 'charge').next).toMatchObject({ assumes: null, stopsAt: { state: 'completed', step: 'audit' } });
  });

  it('calls the group whose step the candidate removes unsafe, and only that group', async () => {
    const { approve: _, ...rest } = V1_STEPS;
    const report = await engine.compatibility(ENV, LOGIC, candidate({ ...rest, reserve: { ...V1_STEPS['reserve']!, next: 'charge' } as StepDef }));
    expect(report.verdict).toBe('unsafe');
    expect(report.unsafe).toBe(3);
    expect(groupAt(report, 'approve').reasons.map((r) => [r.code, r.step])).toEqual([['FLOW_COMPAT_STEP_MISSING', 'approve']]);
    expect(groupAt(report, 'approve').next).toBeNull();
    expect(groupAt(report, 'charge').verdict).toBe('safe');
  });

  it('calls a later step reading an output the instances lack unsafe; the instances whose reader already ran are safe', async () => {
    const report = await engine.compatibility(
      ENV,
      LOGIC,
      candidate({
        ...V1_STEPS,
        reserve: { ...V1_STEPS['reserve']!, next: 'fraud' } as StepDef,
        fraud: { kind: 'proxy', handler: 'test', path: '/fraud', next: 'approve' },
        charge: { ...V1_STEPS['charge']!, input: '{ "res": steps.reserve.id, "score": steps.fraud.score }' } as StepDef,
      }),
    );
    expect(report.verdict).toBe('unsafe');
    expect(groupAt(report, 'approve').reasons.map((r) => [r.code, r.step, r.readBy])).toEqual([['FLOW_COMPAT_OUTPUT_MISSING', 'fraud', 'steps.charge.input']]);
    // charge's input was evaluated when its attempt was prepared: it is not read again
    expect(groupAt(report, 'charge').verdict).toBe('safe');
    expect(report.unsafe).toBe(3);
  });

  it('calls a group whose registered compensation has no step in the candidate unsafe', async () => {
    const { reserve: _, ...rest } = V1_STEPS;
    const report = await engine.compatibility(
      ENV,
      LOGIC,
      candidate({ ...rest, route: { ...V1_STEPS['route']!, otherwise: 'approve' } as StepDef, charge: { kind: 'proxy', handler: 'test', path: '/charge' } }),
    );
    expect(groupAt(report, 'approve').reasons.map((r) => [r.code, r.step])).toEqual([['FLOW_COMPAT_COMPENSATION_MISSING', 'reserve']]);
    expect(groupAt(report, 'charge').verdict).toBe('safe');
  });

  it('calls a read of a recorded output whose schema the candidate narrows unsafe', async () => {
    const report = await engine.compatibility(
      ENV,
      LOGIC,
      candidate({
        ...V1_STEPS,
        reserve: { ...V1_STEPS['reserve']!, output: { type: 'object', properties: { id: { type: 'string' }, region: { type: 'string' } }, required: ['id', 'region'] } } as StepDef,
        charge: { ...V1_STEPS['charge']!, next: 'notify' } as StepDef,
        notify: { kind: 'proxy', handler: 'test', path: '/notify', input: '{ "region": steps.reserve.region }' },
      }),
    );
    expect(groupAt(report, 'approve').reasons.map((r) => [r.code, r.step])).toEqual([['FLOW_COMPAT_OUTPUT_SHAPE_CHANGED', 'reserve']]);
  });

  it('replays the last ended instances on the candidate and says where each would have decided otherwise', async () => {
    expect((await engine.get(declined, ENV)).state).toBe('failed');
    const safe = candidate({ ...V1_STEPS, charge: { ...V1_STEPS['charge']!, next: 'audit' } as StepDef, audit: { kind: 'pass' } });
    const same = await engine.compatibility(ENV, LOGIC, safe, undefined, { replay: 5 });
    expect(same.replays).toEqual({ replayed: 1, same: 1, erased: 0, diverged: [] });
    // with an onError route, the declined charge goes on to audit instead of failing the instance
    const rerouted = candidate({ ...V1_STEPS, charge: { ...V1_STEPS['charge']!, onError: 'audit' } as StepDef, audit: { kind: 'pass' } });
    const report = await engine.compatibility(ENV, LOGIC, rerouted, undefined, { replay: 5 });
    expect(report.replays?.replayed).toBe(1);
    expect(report.replays?.diverged).toEqual([expect.objectContaining({ id: declined, event: 'outcome', step: 'charge' })]);
    // not asked: not done
    expect((await engine.compatibility(ENV, LOGIC, safe)).replays).toBeUndefined();
  });

  it('has nothing to check without an active version below the candidate', async () => {
    const report = await engine.compatibility(ENV, LOGIC, v1);
    expect(report).toMatchObject({ against: null, verdict: 'safe', live: 0, groups: [] });
  });

  it('instances holding the same outputs finished in another order are one group: the sets are sorted', async () => {
    // reserve before route: no run finishes them so, but the set is what counts, not the order
    await asScheduler(engine.db, (c) => c.query(`UPDATE workflows SET ctx = jsonb_set(ctx, '{order}', '["reserve", "route"]') WHERE id = $1`, [slow[0]]));
    try {
      const report = await engine.compatibility(ENV, LOGIC, candidate({ ...V1_STEPS, charge: { ...V1_STEPS['charge']!, next: 'audit' } as StepDef, audit: { kind: 'pass' } }));
      expect(report.groups.map((g) => [g.currentStep, g.count, g.outputs])).toEqual([
        ['approve', 3, ['reserve', 'route']],
        ['charge', 2, ['route']],
      ]);
    } finally {
      await asScheduler(engine.db, (c) => c.query(`UPDATE workflows SET ctx = jsonb_set(ctx, '{order}', '["route", "reserve"]') WHERE id = $1`, [slow[0]]));
    }
  });

  it('over the API: answers the report to flow:publish, and refuses bad input with a code', async () => {
    const api = await testApi(engine);
    const url = `/v1/envs/${ENV}/logic-versions/${LOGIC}/compatibility`;
    const post = async (body: unknown, scope = 'flow:publish', path = url) =>
      api.app.inject({ method: 'POST', url: path, payload: body as object, headers: await bearer({ scope }) });
    const safe = candidate({ ...V1_STEPS, charge: { ...V1_STEPS['charge']!, next: 'audit' } as StepDef, audit: { kind: 'pass' } });

    const ok = await post({ logicVersion: safe });
    expect(ok.statusCode).toBe(200);
    expect(ok.json()).toMatchObject({ logicId: LOGIC, verdict: 'safe', live: 5, against: { version: 1 } });
    expect((await post({ logicVersion: safe, against: 1 }, `flow:publish:${LOGIC}`)).statusCode).toBe(200);

    const notLogic = await post({ logicVersion: { hello: 'world' } });
    expect([notLogic.statusCode, notLogic.json().code]).toEqual([422, 'FLOW_LOGIC_INVALID']);
    const other = await post({ logicVersion: makeLogic({ logicId: 'compat.other', version: 2, start: 'a', steps: { a: { kind: 'pass' } } }) });
    expect([other.statusCode, other.json().code]).toEqual([422, 'FLOW_COMPAT_LOGIC_MISMATCH']);
    const same = await post({ logicVersion: safe, against: 2 });
    expect([same.statusCode, same.json().code]).toEqual([422, 'FLOW_COMPAT_SAME_VERSION']);
    const missing = await post({ logicVersion: safe, against: 7 });
    expect([missing.statusCode, missing.json().code]).toEqual([404, 'FLOW_NOT_FOUND']);
    const noBody = await post({ against: 1 });
    expect([noBody.statusCode, noBody.json().code]).toEqual([422, 'FLOW_SCHEMA_INVALID']);
    expect((await post({ logicVersion: safe }, 'flow:read')).statusCode).toBe(403);
    expect((await post({ logicVersion: safe }, 'flow:publish:team-b.*')).statusCode).toBe(403);
    await api.app.close();
  });
});
