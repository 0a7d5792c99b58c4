import { afterAll, beforeAll, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import type { Api } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';
import { snapshot } from './snapshot.ts';
import { AUTH_SECRET, bearer, parkedLogic } from './support.ts';
import { buildApi } from '../../engine/api/server.ts';

/**
 * Bad input on every route gets a 4xx problem+json with a stable code, never a 500
 * (ARCHITECTURE.md, Contracts: HTTP API): malformed JSON, unknown fields, wrong types, bodies over the limit, unknown versions and
 * ids, a reused idempotency key, a second answer, stale and forged resume tokens.
 */

const ENV = 'bad-env';
const BODY_LIMIT = 4096;
const PUBLISH_LIMIT = 64 * 1024;

const parked = (): LogicVersion => parkedLogic('bi.parked');

interface BodyRoute {
  name: string;
  method: 'POST' | 'PATCH';
  url: () => string;
  valid: () => Record<string, unknown>;
  /** A field set to the wrong type. */
  wrongType: () => Record<string, unknown>;
  limit: number;
}

describeEachDriver('bad input on every route', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  let api: Api;
  let auth: { authorization: string };
  let id: string;
  let resumeToken: string;

  const ROUTES: BodyRoute[] = [
    {
      name: 'publish',
      method: 'POST',
      url: () => `/v1/envs/${ENV}/logic-versions`,
      valid: () => ({ logicVersion: parked() }),
      wrongType: () => ({ logicVersion: 'not an object' }),
      limit: PUBLISH_LIMIT,
    },
    {
      name: 'retire',
      method: 'PATCH',
      url: () => `/v1/envs/${ENV}/logic-versions/bi.parked/1`,
      valid: () => ({ active: true }),
      wrongType: () => ({ active: 'no' }),
      limit: BODY_LIMIT,
    },
    {
      name: 'start',
      method: 'POST',
      url: () => `/v1/envs/${ENV}/workflows`,
      valid: () => ({ logicId: 'bi.parked', input: {} }),
      wrongType: () => ({ logicId: 'bi.parked', input: {}, version: 'one' }),
      limit: BODY_LIMIT,
    },
    ...(['retry', 'repair', 'cancel', 'force-complete', 'replay'] as const).map(
      (verb): BodyRoute => ({
        name: verb,
        method: 'POST',
        url: () => `/v1/envs/${ENV}/workflows/${id}/${verb}`,
        valid: () => ({ reason: 'r', dryRun: true, ...{ repair: { rewindTo: 'ask' }, 'force-complete': { step: 'ask', output: {} }, replay: { step: 'ask' } }[verb as string] }),
        wrongType: () => ({ reason: 42 }),
        limit: BODY_LIMIT,
      }),
    ),
    {
      name: 'decide',
      method: 'POST',
      url: () => `/v1/envs/${ENV}/workflows/${id}/decisions/approve`,
      valid: () => ({ option: 'yes' }),
      wrongType: () => ({ option: ['yes'] }),
      limit: BODY_LIMIT,
    },
    {
      name: 'callback',
      method: 'POST',
      url: () => `/v1/callbacks/${resumeToken}`,
      valid: () => ({ output: {} }),
      wrongType: () => ({ error: { code: 7, message: 'x' } }),
      limit: BODY_LIMIT,
    },
    {
      name: 'events',
      method: 'POST',
      url: () => `/v1/envs/${ENV}/events`,
      valid: () => ({ type: 'x.happened', idempotencyKey: 'e1' }),
      wrongType: () => ({ type: 'x.happened', idempotencyKey: 1 }),
      limit: BODY_LIMIT,
    },
  ];

  beforeAll(async () => {
    svc = await new FakeService().on('/later', () => ({ status: 202, body: { status: 'waiting' } })).listen();
    engine = new Engine({ db: getDb(), env: ENV, executors: { handlers: new Map([['SVC', { url: svc.url }]]) } });
    api = await buildApi({ engine, auth: { secret: AUTH_SECRET, production: false }, bodyLimit: BODY_LIMIT, publishBodyLimit: PUBLISH_LIMIT });
    auth = await bearer({ envs: [ENV], scope: 'flow:admin' });
    await engine.publishVersion(ENV, parked());
    id = (await engine.start({ logicId: 'bi.parked', input: {}, env: ENV })).id;
    await settle(engine);
    resumeToken = svc.calls('/later')[0]!.headers['x-flow-resume-token']!;
    expect((await engine.get(id, ENV)).state).toBe('waiting');
  });
  afterAll(async () => {
    await api.close();
    await engine.close();
    await svc.close();
  });

  const send = (method: string, url: string, payload?: string | object, headers: Record<string, string> = {}) =>
    api.app.inject({
      method: method as 'POST',
      url,
      headers: { ...auth, ...(typeof payload === 'string' ? { 'content-type': 'application/json' } : {}), ...headers },
      ...(payload === undefined ? {} : { payload }),
    });

  function expectProblem(res: Awaited<ReturnType<typeof send>>, status: number, code: string, what: string) {
    expect(res.headers['content-type'], what).toMatch(/^application\/problem\+json/);
    expect(res.json(), what).toMatchObject({ status, code });
    expect(res.statusCode, what).toBe(status);
  }

  it('malformed JSON, unknown fields, wrong types, other media types and oversized bodies: 400, 422, 415, 413 — and nothing written', async () => {
    const before = await snapshot(getDb());
    for (const r of ROUTES) {
      const url = r.url();
      expectProblem(await send(r.method, url, '{"option": '), 400, 'FLOW_MALFORMED_JSON', `${r.name} malformed`);
      expectProblem(await send(r.method, url, ''), 400, 'FLOW_MALFORMED_JSON', `${r.name} empty`);
      expectProblem(await send(r.method, url, { ...r.valid(), surprise: true }), 422, 'FLOW_SCHEMA_INVALID', `${r.name} unknown field`);
      expectProblem(await send(r.method, url, r.wrongType()), 422, 'FLOW_SCHEMA_INVALID', `${r.name} wrong type`);
      expectProblem(await send(r.method, url, '[]'), 422, 'FLOW_SCHEMA_INVALID', `${r.name} an array`);
      expectProblem(await send(r.method, url, 'a=1', { 'content-type': 'application/x-www-form-urlencoded' }), 415, 'FLOW_UNSUPPORTED_MEDIA_TYPE', r.name);
      const big = JSON.stringify({ ...r.valid(), pad: 'x'.repeat(r.limit) });
      expectProblem(await send(r.method, url, big), 413, 'FLOW_BODY_TOO_LARGE', `${r.name} over the limit`);
    }
    expect(await snapshot(getDb())).toEqual(before);
  });

  it('names that do not exist or do not parse: unknown versions, ids, routes, query values, cursors', async () => {
    const before = await snapshot(getDb());
    const cases: [string, string, object | undefined, number, string][] = [
      ['GET', `/v1/envs/${ENV}/logic-versions/bi.parked/99`, undefined, 404, 'FLOW_NOT_FOUND'],
      ['PATCH', `/v1/envs/${ENV}/logic-versions/bi.parked/99`, { active: false }, 404, 'FLOW_NOT_FOUND'],
      ['GET', `/v1/envs/${ENV}/logic-versions/bi.parked/one`, undefined, 422, 'FLOW_SCHEMA_INVALID'],
      ['GET', `/v1/envs/${ENV}/logic-versions/Not_An_Id/1`, undefined, 422, 'FLOW_SCHEMA_INVALID'],
      ['POST', `/v1/envs/${ENV}/workflows`, { logicId: 'bi.parked', version: 99, input: {} }, 404, 'FLOW_NOT_FOUND'],
      ['POST', `/v1/envs/${ENV}/workflows`, { logicId: 'bi.nothing', input: {} }, 404, 'FLOW_NOT_FOUND'],
      ['GET', `/v1/envs/${ENV}/workflows/00000000-0000-4000-8000-000000000000`, undefined, 404, 'FLOW_NOT_FOUND'],
      ['GET', `/v1/envs/${ENV}/workflows/not-a-uuid`, undefined, 422, 'FLOW_SCHEMA_INVALID'],
      // parked on the 202 callback, not on a decision yet
      ['POST', `/v1/envs/${ENV}/workflows/${id}/decisions/approve`, { option: 'yes' }, 409, 'FLOW_NOT_AWAITING_DECISION'],
      ['POST', `/v1/envs/${ENV}/workflows/${id}/repair`, { reason: 'r', rewindTo: 'nope' }, 409, 'FLOW_VERB_NOT_ALLOWED'],
      ['POST', `/v1/envs/${ENV}/workflows/${id}/retry`, {}, 422, 'FLOW_SCHEMA_INVALID'],
      ['POST', `/v1/envs/${ENV}/workflows/${id}/retry`, { reason: '' }, 422, 'FLOW_SCHEMA_INVALID'],
      ['GET', `/v1/envs/${ENV}/workflows?limit=lots`, undefined, 422, 'FLOW_SCHEMA_INVALID'],
      ['GET', `/v1/envs/${ENV}/workflows?limit=0`, undefined, 422, 'FLOW_SCHEMA_INVALID'],
      ['GET', `/v1/envs/${ENV}/workflows?state=stuck`, undefined, 422, 'FLOW_SCHEMA_INVALID'],
      ['GET', `/v1/envs/${ENV}/workflows?stuck=maybe`, undefined, 422, 'FLOW_SCHEMA_INVALID'],
      ['GET', `/v1/envs/${ENV}/workflows?colour=red`, undefined, 422, 'FLOW_SCHEMA_INVALID'],
      ['GET', `/v1/envs/${ENV}/workflows?cursor=bm90IGEgY3Vyc29y`, undefined, 422, 'FLOW_CURSOR_INVALID'],
      ['GET', `/v1/envs/${ENV}/nothing-here`, undefined, 404, 'FLOW_ROUTE_NOT_FOUND'],
      // an env the token does not grant is refused before its spelling is looked at
      ['GET', `/v1/envs/bad env/workflows`, undefined, 403, 'FLOW_ENV_FORBIDDEN'],
      ['POST', `/v1/envs/${ENV}/logic-versions`, { logicVersion: { ...parked(), start: 'missing' } }, 422, 'FLOW_LOGIC_INVALID'],
      ['POST', `/v1/envs/${ENV}/logic-versions`, { logicVersion: parked(), modules: { ['a'.repeat(64)]: 'not base64!' } }, 422, 'FLOW_SCHEMA_INVALID'],
      ['POST', `/v1/envs/${ENV}/logic-versions`, { logicVersion: { ...parked(), description: 'changed' } }, 422, 'FLOW_LOGIC_INVALID'],
    ];
    for (const [method, url, body, status, code] of cases) expectProblem(await send(method, url, body), status, code, `${method} ${url}`);
    expect(await snapshot(getDb())).toEqual(before);
  });

  it('a version republished with another hash is 409, with the same hash 200', async () => {
    const v2 = makeLogic({ ...parked(), version: 2 });
    expect((await send('POST', `/v1/envs/${ENV}/logic-versions`, { logicVersion: v2 })).statusCode).toBe(201);
    expect((await send('POST', `/v1/envs/${ENV}/logic-versions`, { logicVersion: v2 })).json()).toMatchObject({ status: 'unchanged' });
    const other = makeLogic({ ...parked(), version: 2, description: 'another body under the same version' });
    expectProblem(await send('POST', `/v1/envs/${ENV}/logic-versions`, { logicVersion: other }), 409, 'FLOW_VERSION_CONFLICT', 'conflict');
  });

  it('an idempotency key reused with another body is 409; with the same body it replays with 200', async () => {
    const headers = { 'idempotency-key': 'same-key' };
    const first = await send('POST', `/v1/envs/${ENV}/workflows`, { logicId: 'bi.parked', input: { n: 1 } }, headers);
    expect(first.statusCode).toBe(201);
    const again = await send('POST', `/v1/envs/${ENV}/workflows`, { logicId: 'bi.parked', input: { n: 1 } }, headers);
    expect(again.statusCode).toBe(200);
    expect(again.json().id).toBe(first.json().id);
    const before = await snapshot(getDb());
    const other = await send('POST', `/v1/envs/${ENV}/workflows`, { logicId: 'bi.parked', input: { n: 2 } }, headers);
    expectProblem(other, 409, 'FLOW_IDEMPOTENCY_MISMATCH', 'reused key');
    expect(await snapshot(getDb())).toEqual(before);
  });

  it('a callback answers once: a repeat with the same body answers as the first did, another body and any forged token are refused', async () => {
    const forged = `${id}.0.${'B'.repeat(32)}`;
    expectProblem(await send('POST', `/v1/callbacks/${forged}`, { output: {} }), 401, 'FLOW_BAD_TOKEN', 'forged');
    expectProblem(await send('POST', '/v1/callbacks/garbage', { output: {} }), 401, 'FLOW_BAD_TOKEN', 'garbage');
    const ok = await api.app.inject({ method: 'POST', url: `/v1/callbacks/${resumeToken}`, payload: { output: { done: true } } });
    expect(ok.statusCode).toBe(200);
    expect(ok.json()).toEqual({ workflowId: id, state: 'waiting' });
    const before = await snapshot(getDb());
    // the service retries a delivery that landed: the same answer, and nothing changes
    const repeat = await send('POST', `/v1/callbacks/${resumeToken}`, { output: { done: true } });
    expect([repeat.statusCode, repeat.json()]).toEqual([200, { workflowId: id, state: 'waiting' }]);
    expectProblem(await send('POST', `/v1/callbacks/${resumeToken}`, { output: {} }), 409, 'FLOW_CALLBACK_ANSWERED_DIFFERENTLY', 'second answer');
    // now parked on the decision: the first answer goes through, the second is refused
    expect(await snapshot(getDb())).toEqual(before);
    expectProblem(await send('POST', `/v1/envs/${ENV}/workflows/${id}/decisions/nope`, { option: 'yes' }), 409, 'FLOW_WRONG_STEP', 'wrong step');
    expectProblem(await send('POST', `/v1/envs/${ENV}/workflows/${id}/decisions/approve`, { option: 'maybe' }), 422, 'FLOW_BAD_OPTION', 'bad option');
    const decided = await send('POST', `/v1/envs/${ENV}/workflows/${id}/decisions/approve`, { option: 'yes' });
    expect(decided.statusCode).toBe(200);
    expectProblem(await send('POST', `/v1/envs/${ENV}/workflows/${id}/decisions/approve`, { option: 'no' }), 409, 'FLOW_NOT_AWAITING_DECISION', 'second decision');
  });
});
