import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Api } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { testApi, token } from '../api/support.ts';
import { describeEachDriver } from '../support/db.ts';

/**
 * A start's idempotency key is scoped to (env, logicId): one team cannot squat another's keys,
 * and a 409 never names an instance of another definition.
 */

const ENV = 'keys-env';
const waits = (logicId: string) => makeLogic({ logicId, start: 'wait', steps: { wait: { kind: 'decision', options: ['ok'] } } });

describeEachDriver('idempotency keys per definition', (getDb) => {
  let engine: Engine;
  let api: Api;

  beforeAll(async () => {
    engine = new Engine({ db: getDb(), env: ENV, executors: { handlers: new Map() } });
    api = await testApi(engine);
    await engine.publishVersion(ENV, waits('payments.capture'));
    await engine.publishVersion(ENV, waits('team-a.evil'));
  });
  afterAll(async () => {
    await api.close();
    await engine.close();
  });

  async function start(team: 'payments' | 'team-a', logicId: string, key: string, input: object = {}) {
    const scope = `flow:start:${team}.* flow:read:${team}.*`;
    const headers = { authorization: `Bearer ${await token({ envs: [ENV], scope, sub: team })}`, 'idempotency-key': key };
    return api.app.inject({ method: 'POST', url: `/v1/envs/${ENV}/workflows`, headers, payload: { logicId, input } });
  }

  it("a key squatted by another team's definition neither blocks a start nor names the squatter's instance", async () => {
    const squat = await start('team-a', 'team-a.evil', 'order-42');
    expect(squat.statusCode).toBe(201);
    const real = await start('payments', 'payments.capture', 'order-42', { amount: 10 });
    expect(real.statusCode).toBe(201);
    expect(real.json().logicId).toBe('payments.capture');
    expect(real.body).not.toContain(squat.json().id);
  });

  it("a key used by another team's definition first answers the squatter with an instance of its own, not a 409 naming the other's", async () => {
    const theirs = await start('payments', 'payments.capture', 'order-43', { amount: 10 });
    expect(theirs.statusCode).toBe(201);
    const probe = await start('team-a', 'team-a.evil', 'order-43', { anything: true });
    expect(probe.statusCode).toBe(201);
    expect(probe.body).not.toContain(theirs.json().id);
    // within one definition the key still stands for one request
    const misuse = await start('payments', 'payments.capture', 'order-43', { amount: 11 });
    expect(misuse.json()).toMatchObject({ status: 409, code: 'FLOW_IDEMPOTENCY_MISMATCH' });
    expect(misuse.json().detail).toContain(theirs.json().id);
    const repeat = await start('payments', 'payments.capture', 'order-43', { amount: 10 });
    expect(repeat.statusCode).toBe(200);
    expect(repeat.json().id).toBe(theirs.json().id);
  });
});
