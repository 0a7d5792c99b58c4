import { afterAll, beforeAll, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import { FLOW_SCOPES } from '../../contracts/scopes.ts';
import type { Api } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { snapshot } from './snapshot.ts';
import { type TokenClaims, testApi, token } from './support.ts';

/**
 * Every guarded route against every way a caller can be wrong (ARCHITECTURE.md, Contracts: HTTP API): no token, a bad
 * signature, an expired token, a token for another env, a token without the scope, a scope
 * narrowed to other definitions, and an id that lives in another env. Each is refused with its
 * status and stable code as problem+json, and not one row of any table changes.
 */

const A = 'env-a';
const B = 'env-b';

const approval = (logicId: string): LogicVersion =>
  makeLogic({
    logicId,
    start: 'approve',
    steps: {
      approve: { kind: 'decision', options: ['yes', 'no'], approverScope: 'payments:approve', next: 'done' },
      done: { kind: 'pass' },
    },
  });

interface Target {
  env: string;
  id: string;
  logicId: string;
}

interface RouteCase {
  name: string;
  scope: (typeof FLOW_SCOPES)[number];
  method: 'GET' | 'POST' | 'PATCH';
  url: (t: Target) => string;
  body?: (t: Target) => unknown;
  headers?: Record<string, string>;
  /** False where the route names nothing that could live in another env. */
  foreign?: boolean;
  /** A listing that a glob-narrowed scope filters instead of refusing. */
  filters?: true;
}

const verb = (name: string, scope: RouteCase['scope'], body: Record<string, unknown>): RouteCase => ({
  name,
  scope,
  method: 'POST',
  url: (t) => `/v1/envs/${t.env}/workflows/${t.id}/${name}`,
  body: () => ({ reason: 'matrix', ...body }),
});

const ROUTES: RouteCase[] = [
  {
    name: 'publish',
    scope: 'flow:publish',
    method: 'POST',
    url: (t) => `/v1/envs/${t.env}/logic-versions`,
    body: () => ({ logicVersion: approval('tm.fresh') }),
    foreign: false,
  },
  { name: 'list versions', scope: 'flow:read', method: 'GET', url: (t) => `/v1/envs/${t.env}/logic-versions`, foreign: false, filters: true },
  { name: 'show version', scope: 'flow:read', method: 'GET', url: (t) => `/v1/envs/${t.env}/logic-versions/${t.logicId}/1` },
  {
    name: 'retire version',
    scope: 'flow:publish',
    method: 'PATCH',
    url: (t) => `/v1/envs/${t.env}/logic-versions/${t.logicId}/1`,
    body: () => ({ active: false }),
  },
  {
    name: 'start',
    scope: 'flow:start',
    method: 'POST',
    url: (t) => `/v1/envs/${t.env}/workflows`,
    body: (t) => ({ logicId: t.logicId, input: {} }),
  },
  { name: 'list workflows', scope: 'flow:read', method: 'GET', url: (t) => `/v1/envs/${t.env}/workflows`, foreign: false },
  { name: 'show workflow', scope: 'flow:read', method: 'GET', url: (t) => `/v1/envs/${t.env}/workflows/${t.id}` },
  { name: 'history', scope: 'flow:read', method: 'GET', url: (t) => `/v1/envs/${t.env}/workflows/${t.id}/history` },
  verb('retry', 'flow:retry', {}),
  verb('repair', 'flow:repair', { rewindTo: 'approve' }),
  verb('cancel', 'flow:cancel', { compensate: true }),
  verb('force-complete', 'flow:force-complete', { step: 'approve', output: { option: 'yes' } }),
  verb('replay', 'flow:replay', { step: 'approve' }),
  {
    name: 'decide',
    scope: 'flow:decide',
    method: 'POST',
    url: (t) => `/v1/envs/${t.env}/workflows/${t.id}/decisions/approve`,
    body: () => ({ option: 'yes' }),
  },
  {
    name: 'message',
    scope: 'flow:signal',
    method: 'POST',
    url: (t) => `/v1/envs/${t.env}/workflows/${t.id}/messages/matrix.signal`,
    headers: { 'idempotency-key': 'matrix-1' },
    body: () => ({}),
  },
  {
    name: 'events',
    scope: 'flow:events',
    method: 'POST',
    url: (t) => `/v1/envs/${t.env}/events`,
    body: () => ({ type: 'matrix.happened', payload: {}, idempotencyKey: 'matrix-1' }),
    foreign: false,
  },
];

interface Caller {
  name: string;
  claims: (r: RouteCase) => TokenClaims | null;
  /** Which instance/definition the request names: ours (env A) or one of env B under A's path. */
  foreign?: true;
  narrowed?: true;
  status: number;
  code: string;
}

const everyScopeBut = (scope: string) => [...FLOW_SCOPES.filter((s) => s !== scope && s !== 'flow:admin'), 'payments:approve'].join(' ');

const CALLERS: Caller[] = [
  { name: 'no token', claims: () => null, status: 401, code: 'FLOW_UNAUTHENTICATED' },
  { name: 'a bad signature', claims: () => ({ secret: 'another-secret-another-secret-another!!' }), status: 401, code: 'FLOW_TOKEN_INVALID' },
  { name: 'an expired token', claims: () => ({ expiresIn: -120 }), status: 401, code: 'FLOW_TOKEN_EXPIRED' },
  { name: 'a token for another env', claims: () => ({ envs: [B], scope: 'flow:admin payments:approve' }), status: 403, code: 'FLOW_ENV_FORBIDDEN' },
  { name: 'a token lacking the scope', claims: (r) => ({ envs: [A], scope: everyScopeBut(r.scope) }), status: 403, code: 'FLOW_SCOPE_MISSING' },
  {
    name: 'a scope narrowed to other definitions',
    claims: (r) => ({ envs: [A], scope: `${r.scope}:other.* flow:admin:other.* payments:approve` }),
    narrowed: true,
    status: 403,
    code: 'FLOW_SCOPE_MISSING',
  },
  { name: 'an id from another env', claims: () => ({ envs: ['*'], scope: 'flow:admin payments:approve' }), foreign: true, status: 404, code: 'FLOW_NOT_FOUND' },
];

describeEachDriver('the tenant matrix', (getDb) => {
  let engine: Engine;
  let api: Api;
  let ours: Target;
  let theirs: Target;
  let failed: Target;

  beforeAll(async () => {
    engine = new Engine({ db: getDb(), env: A, executors: { handlers: new Map() } });
    api = await testApi(engine);
    await engine.publishVersion(A, approval('tm.approval'));
    await engine.publishVersion(B, approval('tm.approval'));
    await engine.publishVersion(B, approval('tm.only-b'));
    await engine.publishVersion(A, makeLogic({ logicId: 'tm.fails', start: 'approve', steps: { approve: { kind: 'fail', code: 'NOPE' } } }));
    failed = { env: A, id: (await engine.start({ logicId: 'tm.fails', input: {}, env: A })).id, logicId: 'tm.fails' };
    const a = await engine.start({ logicId: 'tm.approval', input: {}, env: A });
    const b = await engine.start({ logicId: 'tm.approval', input: {}, env: B, correlationId: 'theirs' });
    ours = { env: A, id: a.id, logicId: 'tm.approval' };
    theirs = { env: A, id: b.id, logicId: 'tm.only-b' };
  });
  afterAll(async () => {
    await api.close();
    await engine.close();
  });

  async function call(r: RouteCase, t: Target, claims: TokenClaims | null) {
    const headers: Record<string, string> = { ...r.headers, ...(claims === null ? {} : { authorization: `Bearer ${await token(claims)}` }) };
    const body = r.body?.(t);
    return api.app.inject({ method: r.method, url: r.url(t), headers, ...(body === undefined ? {} : { payload: body as object }) });
  }

  for (const r of ROUTES) {
    it(`${r.method} ${r.name}: refuses every wrong caller with its status and code, and writes nothing`, async () => {
      expect((await engine.get(ours.id, A)).state).toBe('waiting');
      const before = await snapshot(getDb());
      const seen: string[] = [];
      for (const c of CALLERS) {
        if ((c.foreign && r.foreign === false) || (c.narrowed && r.filters)) continue;
        const res = await call(r, c.foreign ? theirs : ours, c.claims(r));
        seen.push(`${c.name}: ${res.statusCode} ${res.json().code}`);
        expect(res.headers['content-type'], c.name).toMatch(/^application\/problem\+json/);
        expect(res.json(), c.name).toMatchObject({ status: c.status, code: c.code, instance: r.url(c.foreign ? theirs : ours) });
        expect(await snapshot(getDb()), `${c.name} changed the store`).toEqual(before);
      }
      expect(seen.length).toBeGreaterThanOrEqual(5);
    });
  }

  it('a listing never shows another env, and a glob-narrowed read lists only what it matches', async () => {
    const res = await call(ROUTES.find((r) => r.name === 'list workflows')!, ours, { envs: [A], scope: 'flow:read' });
    expect(res.statusCode).toBe(200);
    expect(res.json().items.map((i: { id: string }) => i.id)).toContain(ours.id);
    expect(res.json().items.map((i: { id: string }) => i.id)).not.toContain(theirs.id);
    const narrowed = await api.app.inject({
      url: `/v1/envs/${A}/workflows?logicId=tm.approval`,
      headers: { authorization: `Bearer ${await token({ envs: [A], scope: 'flow:read:tm.*' })}` },
    });
    expect(narrowed.json().items.map((i: { id: string }) => i.id)).toEqual([ours.id]);
    const versions = await api.app.inject({
      url: `/v1/envs/${A}/logic-versions`,
      headers: { authorization: `Bearer ${await token({ envs: [A], scope: 'flow:read:other.*' })}` },
    });
    expect(versions.json()).toEqual({ items: [] });
  });

  it('every verb dry run answers a preview (or the refusal the verb would get) and writes nothing', async () => {
    expect((await engine.get(failed.id, A)).state).toBe('failed');
    const before = await snapshot(getDb());
    const answers: Record<string, unknown> = {};
    for (const r of ROUTES.filter((x) => ['retry', 'repair', 'cancel', 'force-complete', 'replay'].includes(x.name))) {
      // cancel applies to the waiting instance, the others to the failed one
      const t = r.name === 'cancel' ? ours : failed;
      const res = await api.app.inject({
        method: 'POST',
        url: r.url(t),
        headers: { authorization: `Bearer ${await token({ envs: [A], scope: r.scope })}` },
        payload: { ...(r.body!(t) as object), dryRun: true },
      });
      answers[r.name] = res.json();
    }
    expect(answers['retry']).toMatchObject({ dryRun: true, verb: 'retry', generation: 0, stopsAt: { state: 'failed', step: 'approve' } });
    expect(answers['repair']).toMatchObject({ dryRun: true, generation: 1, steps: [{ step: 'approve', kind: 'fail' }] });
    expect(answers['replay']).toMatchObject({ dryRun: true, generation: 1 });
    expect(answers['cancel']).toMatchObject({ dryRun: true, stopsAt: { state: 'cancelled' } });
    // force-complete applies to dead-lettered instances only: its dry run is refused as the verb would be
    expect(answers['force-complete']).toMatchObject({ status: 409, code: 'FLOW_VERB_NOT_ALLOWED' });
    expect(await snapshot(getDb())).toEqual(before);
  });

  it('a decision needs the step approverScope on top of flow:decide, and a refusal writes nothing', async () => {
    const before = await snapshot(getDb());
    const res = await api.app.inject({
      method: 'POST',
      url: `/v1/envs/${A}/workflows/${ours.id}/decisions/approve`,
      headers: { authorization: `Bearer ${await token({ envs: [A], scope: 'flow:decide' })}` },
      payload: { option: 'yes' },
    });
    expect(res.json()).toMatchObject({ status: 403, code: 'FLOW_APPROVER_FORBIDDEN' });
    expect(await snapshot(getDb())).toEqual(before);
  });

  it('a forged resume token is refused, and writes nothing', async () => {
    const before = await snapshot(getDb());
    const forged = `${ours.id}.0.${'A'.repeat(32)}`;
    const res = await api.app.inject({ method: 'POST', url: `/v1/callbacks/${forged}`, payload: { output: {} } });
    expect(res.json()).toMatchObject({ status: 401, code: 'FLOW_BAD_TOKEN' });
    expect(await snapshot(getDb())).toEqual(before);
  });
});
