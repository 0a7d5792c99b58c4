import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Api } from '../../engine/api/server.ts';
import { createFlowClient } from '../../client/index.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle } from '../support/engine.ts';
import { bearer, testApi } from './support.ts';

/** `POST …/workflows/{id}/messages/{name}`: the scope, the required key, and the first answer given again. */
describeEachDriver('messages API', (getDb) => {
  let engine: Engine;
  let api: Api;
  const logic = makeLogic({
    logicId: 'payments.settle',
    start: 'gate',
    steps: {
      gate: { kind: 'decision', options: ['go'], next: 'settled' },
      settled: { kind: 'waitFor', message: 'funds.settled', schema: { type: 'object', properties: { amount: { type: 'number' } }, required: ['amount'] } },
    },
  });
  beforeAll(async () => {
    engine = new Engine({ db: getDb(), env: 'test-env' });
    api = await testApi(engine);
    await engine.publish(logic, 'test-env');
  });
  afterAll(() => api.close());

  const post = async (id: string, body: unknown, opts: { key?: string; scope?: string; name?: string } = {}) =>
    api.app.inject({
      method: 'POST',
      url: `/v1/envs/test-env/workflows/${id}/messages/${opts.name ?? 'funds.settled'}`,
      headers: { ...(await bearer({ scope: opts.scope ?? 'flow:signal:payments.*' })), ...(opts.key === undefined ? {} : { 'idempotency-key': opts.key }) },
      payload: body as object,
    });

  it('buffers (202) before the step is reached, delivers (200) when parked on it, and answers a repeated key with the first answer', async () => {
    const { id } = await engine.start({ logicId: logic.logicId, input: {}, env: 'test-env' });
    await settle(engine);
    const early = await post(id, { amount: 1 }, { key: 'early' });
    expect(early.statusCode).toBe(202);
    expect(early.json()).toEqual({ workflowId: id, message: 'funds.settled', status: 'buffered' });
    const again = await post(id, { amount: 2 }, { key: 'early' });
    expect([again.statusCode, again.json()]).toEqual([202, early.json()]);
    await engine.resume(id, { step: 'gate', option: 'go', approver: { subject: 'ops', scopes: ['flow:admin'] } }, { env: 'test-env' });
    await settle(engine);
    const done = await engine.get(id, 'test-env');
    expect(done.state).toBe('completed');
    expect(done.steps.at(-1)?.output).toEqual({ amount: 1 });
  });

  it('delivers at once to an instance parked on the message (200)', async () => {
    const { id } = await engine.start({ logicId: logic.logicId, input: {}, env: 'test-env' });
    await settle(engine);
    await engine.resume(id, { step: 'gate', option: 'go', approver: { subject: 'ops', scopes: ['flow:admin'] } }, { env: 'test-env' });
    await settle(engine);
    const res = await post(id, { amount: 5 }, { key: 'now' });
    expect([res.statusCode, res.json().status]).toEqual([200, 'delivered']);
    expect((await post(id, { amount: 5 }, { key: 'now' })).statusCode).toBe(200);
    expect((await post(id, { amount: 6 }, { key: 'later' })).json().code).toBe('FLOW_INSTANCE_ENDED');
  });

  it('the typed client sends a message, and a refusal comes back as FlowApiError with its code', async () => {
    const { id } = await engine.start({ logicId: logic.logicId, input: {}, env: 'test-env' });
    const auth = await bearer({ scope: 'flow:signal' });
    // the client's fetch, answered by the API in process (app.inject: no port)
    const fetch = (async (url: string, init: RequestInit) => {
      const res = await api.app.inject({
        method: init.method as 'POST',
        url: new URL(url).pathname,
        headers: { ...(init.headers as Record<string, string>), ...auth },
        ...(init.body === undefined ? {} : { payload: init.body as string }),
      });
      return new Response(res.body, { status: res.statusCode, headers: { 'content-type': String(res.headers['content-type']) } });
    }) as typeof globalThis.fetch;
    const client = createFlowClient({ baseUrl: 'http://engine.test', env: 'test-env', fetch });
    expect(await client.sendMessage(id, 'funds.settled', { amount: 3 }, { idempotencyKey: 'c1' })).toEqual({ workflowId: id, message: 'funds.settled', status: 'buffered' });
    await expect(client.sendMessage(id, 'funds.settled', { amount: 'x' }, { idempotencyKey: 'c2' })).rejects.toMatchObject({
      code: 'FLOW_MESSAGE_PAYLOAD_INVALID',
      status: 422,
    });
  });

  it('refuses without flow:signal for the definition, without an Idempotency-Key, and a payload that breaks the schema', async () => {
    const { id } = await engine.start({ logicId: logic.logicId, input: {}, env: 'test-env' });
    const before = await engine.get(id, 'test-env');
    const noScope = await post(id, { amount: 1 }, { key: 'a', scope: 'flow:decide flow:start' });
    expect([noScope.statusCode, noScope.json().code]).toEqual([403, 'FLOW_SCOPE_MISSING']);
    const otherGlob = await post(id, { amount: 1 }, { key: 'a', scope: 'flow:signal:orders.*' });
    expect([otherGlob.statusCode, otherGlob.json().code]).toEqual([403, 'FLOW_SCOPE_MISSING']);
    const keyless = await post(id, { amount: 1 });
    expect([keyless.statusCode, keyless.json().code, keyless.json().errors[0].path]).toEqual([422, 'FLOW_SCHEMA_INVALID', 'headers.idempotency-key']);
    const bad = await post(id, { total: 1 }, { key: 'b' });
    expect([bad.statusCode, bad.json().code]).toEqual([422, 'FLOW_MESSAGE_PAYLOAD_INVALID']);
    const unknown = await post(id, {}, { key: 'c', name: 'funds.sent' });
    expect([unknown.statusCode, unknown.json().code]).toEqual([422, 'FLOW_UNKNOWN_MESSAGE']);
    // hostile input is refused with its code, never a 500
    const nul = await post(id, { amount: 1, note: 'a\u0000b' }, { key: 'd' });
    expect([nul.statusCode, nul.json().code]).toEqual([422, 'FLOW_INPUT_UNSTORABLE']);
    const badName = await post(id, {}, { key: 'e', name: 'funds%20settled' });
    expect([badName.statusCode, badName.json().code]).toEqual([422, 'FLOW_SCHEMA_INVALID']);
    expect((await post(id, {}, { key: 'e', name: 'x'.repeat(200) })).json().code).toBe('FLOW_MALFORMED_URL');
    const longKey = await post(id, { amount: 1 }, { key: 'k'.repeat(201) });
    expect([longKey.statusCode, longKey.json().code]).toEqual([422, 'FLOW_SCHEMA_INVALID']);
    expect(await engine.get(id, 'test-env')).toEqual(before);
  });
});
