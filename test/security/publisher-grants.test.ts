import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { main } from '../../cli/main.ts';
import type { LogicVersion } from '../../contracts/index.ts';
import type { Api } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { putModules } from '../../engine/store/put-modules.ts';
import { inEnv } from '../../engine/store/tx.ts';
import { buildTestModules } from '../host-functions/helpers/test-modules.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';
import { AUTH_SECRET, bearer, testApi, token } from '../api/support.ts';
import { TEST_MODULE_BYTES } from '../support/ledger-executor.ts';

/**
 * A version can do no more than its publisher (ARCHITECTURE.md, Invariants). A publisher narrowed
 * to team-a.* tries the three ways a review found to reach another team through a version —
 * calling the payments handler with its token, starting payments' definitions as children, and
 * taking payments' events through a trigger — and is refused at publish with the missing grant.
 * A version recorded before the rule is refused the same things when an instance reaches them.
 */

const ENV = 'test-env';
const TEAM_A = 'flow:publish:team-a.* flow:start:team-a.* flow:read:team-a.*';
const capture = makeLogic({ logicId: 'payments.capture', domain: 'payments', start: 'done', steps: { done: { kind: 'pass' } } });
const evil = (suffix: string, parts: Partial<LogicVersion> & Pick<LogicVersion, 'steps' | 'start'>) =>
  makeLogic({ logicId: `team-a.evil-${suffix}`, domain: 'team-a', ...parts });
const handlerEvil = (suffix: string) =>
  evil(suffix, { start: 'charge', steps: { charge: { kind: 'proxy', handler: 'payments', method: 'POST', path: '/funds/capture' } } });
const childrenEvil = (suffix: string) =>
  evil(suffix, {
    start: 'fan',
    steps: { fan: { kind: 'children', logicId: 'payments.capture', items: '[1, 2]', itemInput: '{}', failurePolicy: 'fail_fast' } },
  });
const triggerEvil = (suffix: string) =>
  evil(suffix, { start: 'keep', steps: { keep: { kind: 'pass' } }, triggers: [{ event: 'payment.received', input: 'event.payload' }] });

describeEachDriver('a version can do no more than its publisher', (getDb) => {
  let payments: FakeService;
  let teamA: FakeService;
  let engine: Engine;
  let api: Api;

  beforeAll(async () => {
    payments = await new FakeService().on('/funds/capture', () => ({ status: 200, body: { captured: true } })).listen();
    teamA = await new FakeService().on('/work', () => ({ status: 200, body: { done: true } })).listen();
    engine = new Engine({
      db: getDb(),
      env: ENV,
      executors: {
        handlers: new Map([
          ['PAYMENTS', { url: payments.url, token: 'payments-profile-secret' }],
          ['TEAM_A', { url: teamA.url, serves: ['team-a.*'] }],
        ]),
      },
    });
    api = await testApi(engine);
    await engine.publishVersion(ENV, capture);
  });
  afterAll(async () => {
    await api.close();
    await engine.close();
    await payments.close();
    await teamA.close();
  });

  const publish = async (doc: LogicVersion, scope = TEAM_A, modules?: Record<string, string>) =>
    api.app.inject({
      method: 'POST',
      url: `/v1/envs/${ENV}/logic-versions`,
      headers: await bearer({ sub: 'team-a-ci', envs: [ENV], scope }),
      payload: { logicVersion: doc, ...(modules === undefined ? {} : { modules }) },
    });
  const start = async (logicId: string, scope = TEAM_A) =>
    api.app.inject({
      method: 'POST',
      url: `/v1/envs/${ENV}/workflows`,
      headers: await bearer({ sub: 'team-a-ci', envs: [ENV], scope }),
      payload: { logicId, input: {} },
    });
  const versionRows = async (logicId: string) =>
    (await inEnv(getDb(), ENV, (c) => c.query('SELECT version FROM logic_versions WHERE logic_id = $1', [logicId]))).rowCount;
  const childrenOf = async (logicId: string) =>
    (await inEnv(getDb(), ENV, (c) => c.query(`SELECT 1 FROM workflows WHERE logic_id = $1`, [logicId]))).rowCount ?? 0;

  it('a narrowed publisher cannot have its version call another team’s handler (and its profile token)', async () => {
    const res = await publish(handlerEvil('a'));
    if (res.statusCode === 201) {
      await start('team-a.evil-a');
      await settle(engine);
    }
    expect(payments.calls('/funds/capture').map((r) => r.headers['authorization'])).toEqual([]);
    expect(res.statusCode).toBe(403);
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(res.json()).toMatchObject({ code: 'FLOW_GRANT_HANDLER' });
    expect(res.json().detail).toContain('FLOW_HANDLER_PAYMENTS_SERVES');
    expect(res.json().errors).toEqual([expect.objectContaining({ path: 'steps.charge' })]);
    expect(await versionRows('team-a.evil-a')).toBe(0);
  });

  it('a handler that serves the publisher’s definitions is called, with the default handler being the domain', async () => {
    const own = makeLogic({ logicId: 'team-a.own', domain: 'team-a', start: 'work', steps: { work: { kind: 'proxy', method: 'POST', path: '/work' } } });
    expect((await publish(own)).statusCode).toBe(201);
    const started = await start('team-a.own');
    await settle(engine);
    expect((await engine.get(started.json().id, ENV)).state).toBe('completed');
    expect(teamA.calls('/work')).toHaveLength(1);
  });

  it('a narrowed publisher cannot have its version start another team’s definitions as children', async () => {
    const res = await publish(childrenEvil('b'));
    if (res.statusCode === 201) {
      await start('team-a.evil-b');
      await settle(engine);
    }
    expect(await childrenOf('payments.capture')).toBe(0);
    expect(res.statusCode).toBe(403);
    expect(res.json()).toMatchObject({ code: 'FLOW_GRANT_CHILD' });
    expect(res.json().detail).toContain('flow:start:payments.capture');
  });

  it('a narrowed publisher cannot trigger its version on another team’s events', async () => {
    const res = await publish(triggerEvil('c'));
    await engine.ingestEvent({ env: ENV, type: 'payment.received', idempotencyKey: 'card-1', payload: { card: '4111111111111111', cvv: '123' } });
    expect(await childrenOf('team-a.evil-c')).toBe(0);
    expect(res.statusCode).toBe(403);
    expect(res.json()).toMatchObject({ code: 'FLOW_GRANT_EVENT' });
    expect(res.json().detail).toContain('flow:events:payment.received');
    // with the events scope for the type, the same version publishes
    expect((await publish(triggerEvil('c2'), `${TEAM_A} flow:events:payment.*`)).statusCode).toBe(201);
  });

  it('event ingress needs flow:events for the posted type, not flow:start', async () => {
    const post = async (scope: string, type: string) =>
      api.app.inject({
        method: 'POST',
        url: `/v1/envs/${ENV}/events`,
        headers: await bearer({ envs: [ENV], scope }),
        payload: { type, idempotencyKey: `k-${scope}-${type}`, payload: {} },
      });
    expect((await post('flow:start', 'payment.received')).json()).toMatchObject({ status: 403, code: 'FLOW_SCOPE_MISSING' });
    expect((await post('flow:events:team-a.*', 'payment.received')).json()).toMatchObject({ status: 403, code: 'FLOW_SCOPE_MISSING' });
    expect((await post('flow:events:payment.*', 'payment.received')).statusCode).toBe(202);
    expect((await post('flow:admin', 'payment.refunded')).statusCode).toBe(202);
  });

  it('a version recorded before the rule is held to least privilege when an instance reaches a handler, a child or a trigger', async () => {
    // as a row published before migration 0019 (no grant recorded), written past the API
    const legacy = [handlerEvil('legacy-a'), childrenEvil('legacy-b'), triggerEvil('legacy-c')];
    await inEnv(getDb(), ENV, async (c) => {
      for (const doc of legacy) {
        await c.query('INSERT INTO logic_versions (env_id, logic_id, version, hash, doc) VALUES ($1, $2, $3, $4, $5)', [ENV, doc.logicId, doc.version, doc.hash, JSON.stringify(doc)]);
      }
      await c.query(`INSERT INTO triggers (env_id, event, logic_id) VALUES ($1, 'payment.received', 'team-a.evil-legacy-c') ON CONFLICT DO NOTHING`, [ENV]);
    });
    const a = await engine.start({ env: ENV, logicId: 'team-a.evil-legacy-a', input: {} });
    const b = await engine.start({ env: ENV, logicId: 'team-a.evil-legacy-b', input: {} });
    await engine.ingestEvent({ env: ENV, type: 'payment.received', idempotencyKey: 'card-2', payload: { card: '4111111111111111' } });
    await settle(engine);
    expect(payments.calls('/funds/capture')).toEqual([]);
    expect(await childrenOf('payments.capture')).toBe(0);
    expect(await childrenOf('team-a.evil-legacy-c')).toBe(0);
    expect(await engine.get(a.id, ENV)).toMatchObject({ state: 'failed', error: { code: 'FLOW_GRANT_HANDLER', step: 'charge' } });
    expect(await engine.get(b.id, ENV)).toMatchObject({ state: 'failed', error: { code: 'FLOW_GRANT_CHILD', step: 'fan' } });

    // the operator re-vouches by publishing the same hash under a grant that covers it: recorded, and in force
    expect(await engine.publishVersion(ENV, legacy[0])).toMatchObject({ status: 'unchanged' });
    const vouched = await inEnv(getDb(), ENV, (c) => c.query<{ grants: unknown[] }>('SELECT grants FROM logic_versions WHERE logic_id = $1', ['team-a.evil-legacy-a']));
    expect(vouched.rows[0]!.grants).toEqual([expect.objectContaining({ subject: null, scopes: null })]);
    const again = await engine.start({ env: ENV, logicId: 'team-a.evil-legacy-a', input: {} });
    await settle(engine);
    expect((await engine.get(again.id, ENV)).state).toBe('completed');
    expect(payments.calls('/funds/capture')).toHaveLength(1);
  });

  it('a legacy version’s compensation through an ungranted handler is refused at execution too', async () => {
    const doc = evil('legacy-comp', {
      start: 'work',
      steps: {
        work: { kind: 'proxy', method: 'POST', path: '/work', next: 'boom', compensate: { kind: 'proxy', handler: 'payments', method: 'POST', path: '/funds/capture' } },
        boom: { kind: 'fail', code: 'BOOM' },
      },
    });
    await inEnv(getDb(), ENV, (c) =>
      c.query('INSERT INTO logic_versions (env_id, logic_id, version, hash, doc) VALUES ($1, $2, $3, $4, $5)', [ENV, doc.logicId, doc.version, doc.hash, JSON.stringify(doc)]),
    );
    const calls = payments.calls('/funds/capture').length;
    const s = await engine.start({ env: ENV, logicId: doc.logicId, input: {} });
    await settle(engine);
    expect(payments.calls('/funds/capture')).toHaveLength(calls);
    const record = await engine.get(s.id, ENV);
    expect(record).toMatchObject({ state: 'dead_lettered', error: { code: 'FLOW_COMPENSATION_FAILED' } });
    expect(record.steps.find((a) => a.kind === 'compensation')).toMatchObject({ state: 'failed', error: { code: 'FLOW_GRANT_HANDLER' } });
  });

  it('a legacy version’s real module whose host function goes to an ungranted handler is refused before any host call', async () => {
    const built = await buildTestModules(['one-call']);
    try {
      const sha256 = built.hash['one-call']!;
      const doc = evil('legacy-host', {
        start: 'score',
        modules: { risk: { sha256, imports: { lookup: { handler: 'payments', method: 'POST', path: '/funds/capture' } } } },
        steps: { score: { kind: 'func', module: 'risk', input: '{ "account": "acc-1" }' } },
      });
      await inEnv(getDb(), ENV, async (c) => {
        await putModules(c, ENV, new Map([[sha256, await built.load(sha256)]]));
        await c.query('INSERT INTO logic_versions (env_id, logic_id, version, hash, doc) VALUES ($1, $2, $3, $4, $5)', [ENV, doc.logicId, doc.version, doc.hash, JSON.stringify(doc)]);
      });
      const reached = payments.received.length;
      const s = await engine.start({ env: ENV, logicId: doc.logicId, input: {} });
      await settle(engine);
      expect(payments.received).toHaveLength(reached);
      const record = await engine.get(s.id, ENV);
      expect(record).toMatchObject({ state: 'failed', error: { code: 'FLOW_GRANT_HANDLER' } });
      expect(record.steps).toEqual([expect.objectContaining({ step: 'score', state: 'failed', error: expect.objectContaining({ code: 'FLOW_GRANT_HANDLER' }) })]);
    } finally {
      await built.cleanup();
    }
  }, 120_000);

  it('a handler profile that stops serving a definition refuses its calls at execution, not only at publish', async () => {
    const own = makeLogic({ logicId: 'team-a.served', domain: 'team-a', start: 'work', steps: { work: { kind: 'proxy', method: 'POST', path: '/work' } } });
    expect((await publish(own)).statusCode).toBe(201);
    // the same store, another engine whose team-a profile no longer lists team-a.*
    const narrower = new Engine({ db: getDb(), env: ENV, executors: { handlers: new Map([['TEAM_A', { url: teamA.url, serves: ['team-a.other'] }]]) } });
    try {
      const calls = teamA.calls('/work').length;
      const s = await narrower.start({ env: ENV, logicId: 'team-a.served', input: {} });
      await settle(narrower);
      expect(await narrower.get(s.id, ENV)).toMatchObject({ state: 'failed', error: { code: 'FLOW_GRANT_HANDLER' } });
      expect(teamA.calls('/work')).toHaveLength(calls);
    } finally {
      await narrower.close();
    }
  });

  it('a retired version does not start as a child: the children step fails FLOW_VERSION_RETIRED', async () => {
    const child = makeLogic({ logicId: 'team-a.child', domain: 'team-a', start: 'done', steps: { done: { kind: 'pass' } } });
    const parent = makeLogic({
      logicId: 'team-a.parent',
      domain: 'team-a',
      start: 'fan',
      steps: { fan: { kind: 'children', logicId: 'team-a.child', items: '[1]', itemInput: '{}', failurePolicy: 'all_settled' } },
    });
    await engine.publishVersion(ENV, child);
    await engine.publishVersion(ENV, parent);
    await engine.setVersionActive(ENV, 'team-a.child', 1, false);
    const p = await engine.start({ env: ENV, logicId: 'team-a.parent', input: {} });
    await settle(engine);
    expect(await childrenOf('team-a.child')).toBe(0);
    expect(await engine.get(p.id, ENV)).toMatchObject({ state: 'failed', error: { code: 'FLOW_VERSION_RETIRED', step: 'fan' } });
  });

  it('publish stores no module the version does not name, even when the answer is unchanged', async () => {
    const [sha, bytes] = Object.entries(TEST_MODULE_BYTES)[0]!;
    const modules = { [sha]: Buffer.from(bytes).toString('base64') };
    const plain = makeLogic({ logicId: 'team-a.plain', domain: 'team-a', start: 'done', steps: { done: { kind: 'pass' } } });
    expect((await publish(plain, TEAM_A, modules)).statusCode).toBe(201);
    expect((await publish(plain, TEAM_A, modules)).json()).toMatchObject({ status: 'unchanged' });
    const stored = await inEnv(getDb(), ENV, (c) => c.query('SELECT 1 FROM modules WHERE sha256 = $1', [sha]));
    expect(stored.rowCount).toBe(0);
  });

  it('bulk job details are refused to a read scope narrowed to other definitions', async () => {
    const admin = await bearer({ envs: [ENV], scope: 'flow:admin' });
    const job = await api.app.inject({
      method: 'POST',
      url: `/v1/envs/${ENV}/bulk/cancel`,
      headers: admin,
      payload: { filter: { logicId: 'payments.capture' }, reason: 'audit' },
    });
    expect(job.statusCode).toBe(202);
    const url = `/v1/envs/${ENV}/bulk/${job.json().id}`;
    const narrowed = await api.app.inject({ url, headers: await bearer({ envs: [ENV], scope: 'flow:read:team-a.*' }) });
    expect(narrowed.json()).toMatchObject({ status: 403, code: 'FLOW_SCOPE_MISSING' });
    expect((await api.app.inject({ url, headers: await bearer({ envs: [ENV], scope: 'flow:read:payments.*' }) })).statusCode).toBe(200);
  });

  it('s8flow publish prints each refusal with its code and the missing grant', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'grants-'));
    const url = await api.app.listen({ host: '127.0.0.1', port: 0 });
    let err = '';
    const spies = [
      vi.spyOn(process.stdout, 'write').mockImplementation(() => true),
      vi.spyOn(process.stderr, 'write').mockImplementation((s) => {
        err += String(s);
        return true;
      }),
    ];
    try {
      const both = makeLogic({
        logicId: 'team-a.evil-cli',
        domain: 'team-a',
        start: 'charge',
        steps: {
          charge: { kind: 'proxy', handler: 'payments', method: 'POST', path: '/funds/capture', next: 'fan' },
          fan: { kind: 'children', logicId: 'payments.capture', items: '[1]', itemInput: '{}', failurePolicy: 'fail_fast' },
        },
      });
      await writeFile(join(dir, 'team-a.evil-cli@1.json'), JSON.stringify(both));
      const code = await main(['publish', '--to', url, '--from', dir, '--env', ENV, '--token', await token({ envs: [ENV], scope: TEAM_A, secret: AUTH_SECRET })]);
      expect(code).toBe(1);
    } finally {
      for (const s of spies) s.mockRestore();
      await rm(dir, { recursive: true, force: true });
    }
    expect(err).toContain('steps.charge: [FLOW_GRANT_HANDLER]');
    expect(err).toContain('(missing: FLOW_HANDLER_PAYMENTS_SERVES matching team-a.evil-cli)');
    expect(err).toContain('steps.fan: [FLOW_GRANT_CHILD]');
    expect(err).toContain('(missing: flow:start:payments.capture)');
  });
});
