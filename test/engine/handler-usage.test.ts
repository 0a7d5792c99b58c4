import { expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { bearer, testApi } from '../api/support.ts';
import { describeEachDriver } from '../support/db.ts';
import { OPERATOR, settle, testEngine } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';
import type { StepDef } from '../../contracts/index.ts';

const ENV = 'test-env';

/** v1 reserves (undone by /release) and captures; v2 drops the reservation and adds a fraud check. */
const v1 = makeLogic({
  logicId: 'usage.pay',
  version: 1,
  domain: 'payments',
  start: 'reserve',
  steps: {
    reserve: { kind: 'proxy', path: '/reserve', compensate: { kind: 'proxy', path: '/release' }, next: 'capture' },
    capture: { kind: 'proxy', path: '/capture' },
  },
});
const v2 = makeLogic({
  logicId: 'usage.pay',
  version: 2,
  domain: 'payments',
  start: 'fraud',
  steps: {
    fraud: { kind: 'proxy', handler: 'risk', path: '/score', next: 'capture' },
    capture: { kind: 'proxy', path: '/capture' },
  },
});

describeEachDriver('handler usage report', (getDb) => {
  it('says a path may be turned off only when no active version calls it and no instance of one that does is live', async () => {
    const engine = new Engine({ db: getDb(), env: ENV, executors: { handlers: new Map() } });
    await engine.publish(v1);
    await engine.publish(v2);
    // one v1 instance, left pending (no workers run), then v1 retired
    const { id } = await engine.start({ logicId: 'usage.pay', version: 1, input: {} });
    await engine.setVersionActive(ENV, 'usage.pay', 1, false);

    const path = async (handler: string, p: string) => {
      const h = (await engine.handlerUsage(ENV)).items.find((i) => i.handler === handler);
      return { handler: h, path: h?.paths.find((x) => x.path === p) };
    };
    const release = await path('payments', '/release');
    expect(release.path?.mayTurnOff).toBe(false);
    expect(release.path?.reason).toMatch(/^no: 1 live instance of usage\.pay@1 may still call it: 1 pending at `reserve`, which would call it unwinding through `reserve \(compensate\)`$/);
    expect(release.path?.versions).toEqual([
      {
        logicId: 'usage.pay',
        version: 1,
        active: false,
        calledFrom: ['reserve (compensate)'],
        live: { pending: 1 },
        groups: [{ state: 'pending', currentStep: 'reserve', count: 1, reach: 'compensation', via: 'reserve (compensate)' }],
      },
    ]);
    const capture = await path('payments', '/capture');
    expect(capture.path?.mayTurnOff).toBe(false);
    expect(capture.path?.reason).toMatch(/usage\.pay@2 is active/);
    expect((await path('risk', '/score')).handler?.mayTurnOff).toBe(false);

    await engine.ops.cancel(id, { reason: 'drained by hand' }, { ...OPERATOR, env: ENV });
    const after = await path('payments', '/release');
    expect(after.path?.mayTurnOff).toBe(true);
    expect(after.path?.reason).toBe('yes: every version that calls it (usage.pay@1) is retired and none of their instances is live');
    // the profile as a whole is still needed: v2 calls /capture
    expect(after.handler?.mayTurnOff).toBe(false);
    await engine.close();
  });

  it('over the API: a reader narrowed to other definitions sees no names, but the verdict counts them', async () => {
    const engine = new Engine({ db: getDb(), env: ENV, executors: { handlers: new Map() } });
    await engine.publish(v2);
    const api = await testApi(engine);
    const narrowed = await api.app.inject({ method: 'GET', url: `/v1/envs/${ENV}/handlers?handler=risk`, headers: await bearer({ scope: 'flow:read:team-b.*' }) });
    expect(narrowed.statusCode).toBe(200);
    const body = narrowed.json();
    expect(body.items[0].handler).toBe('risk');
    expect(body.items[0].paths[0].versions).toEqual([]);
    expect(body.items[0].mayTurnOff).toBe(false);
    expect(body.items[0].reason).toBe('no: 1 of its 1 path is still needed: /score');
    expect(body.items[0].paths[0].reason).toMatch(/a version you may not read is active/);
    expect(body.unreadable).toBeGreaterThanOrEqual(1);
    const none = await api.app.inject({ method: 'GET', url: `/v1/envs/${ENV}/handlers`, headers: await bearer({ scope: 'flow:start' }) });
    expect(none.statusCode).toBe(403);
    // a name nothing calls is refused, not answered "turn it off": it is more likely misspelt
    const misspelt = await api.app.inject({ method: 'GET', url: `/v1/envs/${ENV}/handlers?handler=rsik`, headers: await bearer({ scope: 'flow:read' }) });
    expect(misspelt.statusCode).toBe(404);
    expect(misspelt.json()).toMatchObject({ code: 'FLOW_UNCALLED_HANDLER' });
    expect(misspelt.json().detail).toMatch(/calls handler rsik: check the name \(the handlers its versions call: .*risk/);
    const noPath = await api.app.inject({ method: 'GET', url: `/v1/envs/${ENV}/handlers?handler=risk&path=/scores`, headers: await bearer({ scope: 'flow:read' }) });
    expect(noPath.json()).toMatchObject({ status: 404, code: 'FLOW_UNCALLED_HANDLER' });
    // hostile names are names nothing calls, never a 500
    for (const odd of ['%00', '%ED%A0%80', encodeURIComponent('\u{1F4A9}'.repeat(50))]) {
      const res = await api.app.inject({ method: 'GET', url: `/v1/envs/${ENV}/handlers?handler=${odd}`, headers: await bearer({ scope: 'flow:read' }) });
      expect(res.statusCode, odd).toBeLessThan(500);
    }
    for (const bad of ['path=score', `path=/${'x'.repeat(2001)}`, 'handler=', 'profile=risk']) {
      const res = await api.app.inject({ method: 'GET', url: `/v1/envs/${ENV}/handlers?${bad}`, headers: await bearer({ scope: 'flow:read' }) });
      expect(res.statusCode, bad).toBe(422);
      expect(res.json().code, bad).toBe('FLOW_SCHEMA_INVALID');
    }
    await api.app.close();
    await engine.close();
  });
});

/**
 * v1 of a payment: a slow one reserves (undone by /release), waits for an approval, then charges;
 * a fast one charges at once; both then wait for a confirmation. Instances stand at every place.
 */
const PLACES: Record<string, StepDef> = {
  route: { kind: 'choice', branches: [{ when: 'input.fast = true', next: 'charge' }], otherwise: 'reserve' },
  reserve: { kind: 'proxy', handler: 'test', path: '/reserve', compensate: { kind: 'proxy', handler: 'test', path: '/release' }, next: 'approve' },
  approve: { kind: 'decision', options: ['ok'], next: 'charge' },
  charge: { kind: 'proxy', handler: 'test', path: '/charge', next: 'confirm' },
  confirm: { kind: 'decision', options: ['ok'] },
};
const places = makeLogic({ logicId: 'usage.places', version: 1, domain: 'payments', start: 'route', steps: PLACES });

describeEachDriver('handler usage report, by where live instances stand', (getDb) => {
  it('holds a path back for instances at it, ahead of it or able to compensate through it, and not for those past it', async () => {
    const svc = await new FakeService().on('/reserve', () => ({ status: 200, body: {} })).on('/charge', () => ({ status: 200, body: {} })).listen();
    const engine = testEngine(getDb(), svc);
    await engine.publish(places, ENV);
    for (let i = 0; i < 3; i++) await engine.start({ logicId: places.logicId, input: { fast: false }, env: ENV });
    for (let i = 0; i < 2; i++) await engine.start({ logicId: places.logicId, input: { fast: true }, env: ENV });
    await settle(engine);
    // not settled: these stay pending at the step they are about to call
    const atReserve = (await engine.start({ logicId: places.logicId, input: { fast: false }, env: ENV })).id;
    await engine.start({ logicId: places.logicId, input: { fast: true }, env: ENV });
    await engine.setVersionActive(ENV, places.logicId, 1, false);

    const usage = async (path: string) => (await engine.handlerUsage(ENV, () => true, { handler: 'test', path })).items[0]!.paths[0]!;
    const places_ = (p: Awaited<ReturnType<typeof usage>>) => p.versions[0]!.groups.map((g) => [g.state, g.currentStep, g.count, g.reach, g.via]);

    const charge = await usage('/charge');
    expect(places_(charge)).toEqual([
      ['pending', 'charge', 1, 'at', 'charge'],
      ['waiting', 'approve', 3, 'ahead', 'charge'],
      ['pending', 'reserve', 1, 'ahead', 'charge'],
      ['waiting', 'confirm', 2, 'passed', null],
    ]);
    expect(charge.mayTurnOff).toBe(false);
    expect(charge.reason).toBe(
      'no: 5 live instances of usage.places@1 may still call it: 1 pending at `charge`, which calls it; 3 waiting at `approve`, whose path reaches `charge`; 1 pending at `reserve`, whose path reaches `charge` (2 live instances have passed every call of it; only a repair or replay back to such a step would call it again)',
    );
    const release = await usage('/release');
    expect(places_(release)).toEqual([
      ['waiting', 'approve', 3, 'compensation', 'reserve (compensate)'],
      ['pending', 'reserve', 1, 'compensation', 'reserve (compensate)'],
      ['waiting', 'confirm', 2, 'passed', null],
      ['pending', 'charge', 1, 'passed', null],
    ]);
    expect(release.mayTurnOff).toBe(false);

    // once the one about to reserve is gone, every live instance is past /reserve: it may go
    const reserveBefore = await usage('/reserve');
    expect(reserveBefore.mayTurnOff).toBe(false);
    expect(reserveBefore.reason).toMatch(/^no: 1 live instance of usage\.places@1 may still call it: 1 pending at `reserve`, which calls it \(6 live instances have passed/);
    await engine.ops.cancel(atReserve, { reason: 'drained by hand' }, { ...OPERATOR, env: ENV });
    await settle(engine);
    const reserve = await usage('/reserve');
    expect(reserve.mayTurnOff).toBe(true);
    expect(reserve.reason).toBe(
      'yes: every version that calls it (usage.places@1) is retired, and 6 live instances have passed every call of it; only a repair or replay back to such a step would call it again',
    );
    await engine.close();
    await svc.close();
  });
});
