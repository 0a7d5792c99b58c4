import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import type { Api } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';
import { snapshot } from '../api/snapshot.ts';
import { bearer, parkedLogic, testApi } from '../api/support.ts';

/**
 * Input Postgres cannot hold — an integer past int4, a year it has no calendar for, an
 * impossible date in a cursor, JSON nested deeper than its parser goes, a NUL or a lone
 * surrogate in text that is stored — is the caller's mistake: a 4xx problem with a stable code,
 * never FLOW_INTERNAL, and nothing written.
 */

const ENV = 'b500-env';

const parked = (): LogicVersion => parkedLogic('b5.parked', { triggers: [{ event: 'b5.happened', input: '{}' }] });

const deep = (n: number): string => `${'{"a":['.repeat(n / 2)}1${']}'.repeat(n / 2)}`;
const cursor = (createdAt: string) => Buffer.from(JSON.stringify({ createdAt, id: randomUUID() })).toString('base64url');

describeEachDriver('bad input Postgres cannot hold answers 4xx, not 500', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  let api: Api;
  let auth: { authorization: string };
  let id: string;
  let resumeToken: string;

  beforeAll(async () => {
    svc = await new FakeService().on('/later', () => ({ status: 202, body: { status: 'waiting' } })).listen();
    engine = new Engine({ db: getDb(), env: ENV, executors: { handlers: new Map([['SVC', { url: svc.url }]]) } });
    api = await testApi(engine);
    auth = await bearer({ envs: [ENV], scope: 'flow:admin' });
    await engine.publishVersion(ENV, parked());
    id = (await engine.start({ logicId: 'b5.parked', input: {}, env: ENV })).id;
    await settle(engine);
    resumeToken = svc.calls('/later')[0]!.headers['x-flow-resume-token']!;
  });
  afterAll(async () => {
    await api.close();
    await engine.close();
    await svc.close();
  });

  const send = (method: string, url: string, payload?: string) =>
    api.app.inject({
      method: method as 'POST',
      url,
      headers: { ...auth, ...(payload === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(payload === undefined ? {} : { payload }),
    });

  const W = `/v1/envs/${ENV}/workflows`;
  const cases: [string, string, () => string, (() => string) | undefined][] = [
    ['a version past int4 in the query', 'GET', () => `${W}?version=99999999999`, undefined],
    ['a version past int4 in the path', 'GET', () => `/v1/envs/${ENV}/logic-versions/b5.parked/99999999999`, undefined],
    ['a version past int4 in a start', 'POST', () => W, () => '{"logicId":"b5.parked","version":99999999999,"input":{}}'],
    ['year 0 in from', 'GET', () => `${W}?from=0000-01-01T00:00:00Z`, undefined],
    ['an impossible date in a cursor', 'GET', () => `${W}?cursor=${cursor('2024-99-99T99:99:99.000000Z')}`, undefined],
    ['year 0 in a cursor', 'GET', () => `${W}?cursor=${cursor('0000-01-01T00:00:00.000000Z')}`, undefined],
    ['start input nested 2,500 deep', 'POST', () => W, () => `{"logicId":"b5.parked","input":${deep(2500)}}`],
    ['start input nested 200,000 deep', 'POST', () => W, () => `{"logicId":"b5.parked","input":${deep(200000)}}`],
    ['a forced output nested 2,500 deep', 'POST', () => `${W}/${id}/force-complete`, () => `{"reason":"r","step":"ask","output":${deep(2500)}}`],
    ['an event payload nested 2,500 deep', 'POST', () => `/v1/envs/${ENV}/events`, () => `{"type":"b5.happened","idempotencyKey":"k3","payload":${deep(2500)}}`],
    ['a NUL in a correlationId', 'POST', () => W, () => '{"logicId":"b5.parked","input":{},"correlationId":"a\\u0000b"}'],
    ['a NUL in start input', 'POST', () => W, () => '{"logicId":"b5.parked","input":{"a":"\\u0000"}}'],
    ['a lone surrogate in start input', 'POST', () => W, () => '{"logicId":"b5.parked","input":["\\ud800"]}'],
    ['a NUL in a correlationId filter', 'GET', () => `${W}?correlationId=a%00b`, undefined],
    ['a NUL in a reason', 'POST', () => `${W}/${id}/cancel`, () => '{"reason":"a\\u0000b"}'],
    ['a NUL in a forced output', 'POST', () => `${W}/${id}/force-complete`, () => '{"reason":"r","step":"ask","output":{"a":"\\u0000"}}'],
    ['a NUL in a decision', 'POST', () => `${W}/${id}/decisions/approve`, () => '{"option":"yes","reason":"\\u0000"}'],
    ['a NUL in a callback output', 'POST', () => `/v1/callbacks/${resumeToken}`, () => '{"output":{"a":"\\u0000"}}'],
    ['a NUL in an event type', 'POST', () => `/v1/envs/${ENV}/events`, () => '{"type":"b5.\\u0000","idempotencyKey":"k1"}'],
    ['a NUL in an event payload', 'POST', () => `/v1/envs/${ENV}/events`, () => '{"type":"b5.happened","idempotencyKey":"k2","payload":"\\u0000"}'],
    ['a NUL in an idempotency key', 'POST', () => `/v1/envs/${ENV}/events`, () => '{"type":"b5.happened","idempotencyKey":"\\u0000"}'],
  ];

  it.each(cases)('%s: a 4xx problem with a stable code, and nothing written', async (_name, method, url, body) => {
    const before = await snapshot(getDb());
    const res = await send(method, url(), body?.());
    expect(res.statusCode, res.body.slice(0, 300)).toBeGreaterThanOrEqual(400);
    expect(res.statusCode, res.body.slice(0, 300)).toBeLessThan(500);
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(res.json().code).toMatch(/^FLOW_/);
    expect(await snapshot(getDb())).toEqual(before);
  });

  it('a value Postgres refuses as data that no schema caught is FLOW_INPUT_UNSTORABLE (422), not FLOW_INTERNAL', async () => {
    // the last line behind the schemas: any SQLSTATE of class 22 (data exception) or 54 (program limit)
    for (const code of ['22P05', '22008', '22003', '54001']) {
      const spy = vi.spyOn(engine, 'ingestEvent').mockRejectedValueOnce(Object.assign(new Error('refused by postgres'), { code }));
      const res = await send('POST', `/v1/envs/${ENV}/events`, '{"type":"b5.happened","idempotencyKey":"guard"}');
      spy.mockRestore();
      expect(res.statusCode, code).toBe(422);
      expect(res.json(), code).toMatchObject({ code: 'FLOW_INPUT_UNSTORABLE' });
    }
    // wrapped by a layer in between, it is found through `cause`
    const wrapped = vi.spyOn(engine, 'ingestEvent').mockRejectedValueOnce(new Error('commit failed', { cause: Object.assign(new Error('x'), { code: '22021' }) }));
    expect((await send('POST', `/v1/envs/${ENV}/events`, '{"type":"b5.happened","idempotencyKey":"guard"}')).json()).toMatchObject({ code: 'FLOW_INPUT_UNSTORABLE' });
    wrapped.mockRestore();
    // a lost connection is not the caller's: still a 500
    const spy = vi.spyOn(engine, 'ingestEvent').mockRejectedValueOnce(Object.assign(new Error('gone'), { code: '08006' }));
    expect((await send('POST', `/v1/envs/${ENV}/events`, '{"type":"b5.happened","idempotencyKey":"guard"}')).statusCode).toBe(500);
    spy.mockRestore();
  });
});
