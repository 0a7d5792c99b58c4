import { expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { bearer, testApi } from '../api/support.ts';
import { describeEachDriver } from '../support/db.ts';
import { OPERATOR } from '../support/engine.ts';

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
    expect(release.path?.reason).toMatch(/^no: 1 instance of usage\.pay@1 has not ended/);
    expect(release.path?.versions).toEqual([{ logicId: 'usage.pay', version: 1, active: false, calledFrom: ['reserve (compensate)'], live: { pending: 1 } }]);
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
    expect(body.items[0].reason).toMatch(/a version you may not read is active/);
    expect(body.unreadable).toBeGreaterThanOrEqual(1);
    const none = await api.app.inject({ method: 'GET', url: `/v1/envs/${ENV}/handlers`, headers: await bearer({ scope: 'flow:start' }) });
    expect(none.statusCode).toBe(403);
    await api.app.close();
    await engine.close();
  });
});
