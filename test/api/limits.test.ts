import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Api } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { listLimitAudit } from '../../engine/store/audit.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { describeEachDriver } from '../support/db.ts';
import { bearer, testApi } from './support.ts';

/** Limits through the API: `flow:admin` changes them, every change is audited, `*` needs an every-env token. */
describeEachDriver('limits API', (getDb) => {
  let engine: Engine;
  let api: Api;
  beforeAll(async () => {
    engine = new Engine({
      db: getDb(),
      env: 'test-env',
      executors: { handlers: new Map([['LEDGER', { url: 'http://127.0.0.1:9', limit: { concurrency: 8, rate: 50, burst: 10 } }]]) },
      permitSweepMs: 0,
    });
    await engine.permits.start();
    api = await testApi(engine);
  });
  afterAll(async () => {
    await engine.permits.stop();
    await api.close();
  });

  const put = async (path: string, body: unknown, claims: Parameters<typeof bearer>[0] = {}) =>
    api.app.inject({ method: 'PUT', url: `/v1/envs/${path}`, headers: await bearer(claims), payload: body as object });

  it('lists the configured limits with their source', async () => {
    const res = await api.app.inject({ method: 'GET', url: '/v1/envs/test-env/limits', headers: await bearer({ scope: 'flow:read' }) });
    expect(res.statusCode).toBe(200);
    expect(res.json().items).toContainEqual(expect.objectContaining({ scope: '*', resource: 'handler:LEDGER', concurrency: 8, rate: 50, burst: 10, source: 'config' }));
  });

  it('a change needs flow:admin, and a limit on every env needs a token for every env', async () => {
    const body = { concurrency: 2, rate: null, reason: 'ledger is degraded' };
    expect((await put('test-env/limits/handler:LEDGER', body, { scope: 'flow:read' })).json().code).toBe('FLOW_SCOPE_MISSING');
    expect((await put('*/limits/handler:LEDGER', body)).statusCode).toBe(403);
    expect((await put('*/limits/key:pay.capture:charge', body, { envs: ['*'] })).json().code).toBe('FLOW_LIMIT_SCOPE_INVALID');
    expect((await put('test-env/limits/nonsense', body)).statusCode).toBe(422);
    expect((await put('test-env/limits/handler:LEDGER', { ...body, concurrency: 0 })).statusCode).toBe(422);
  });

  it('a change is audited with actor, reason, before and after, and replaces configuration', async () => {
    const res = await put('*/limits/handler:LEDGER', { concurrency: 2, rate: 5, burst: 1, reason: 'ledger is degraded' }, { envs: ['*'], sub: 'ops@example.com' });
    expect(res.statusCode).toBe(200);
    expect(res.json().items).toEqual([expect.objectContaining({ scope: '*', resource: 'handler:LEDGER', concurrency: 2, rate: 5, burst: 1, source: 'override', updatedBy: 'ops@example.com' })]);
    const reset = await api.app.inject({ method: 'DELETE', url: '/v1/envs/*/limits/handler:LEDGER', headers: await bearer({ envs: ['*'], sub: 'ops@example.com' }), payload: { reason: 'recovered' } });
    expect(reset.statusCode).toBe(200);
    expect(reset.json().items).toEqual([expect.objectContaining({ concurrency: 8, source: 'config' })]);
    const audit = await asScheduler(engine.db, (c) => listLimitAudit(c, 'handler:LEDGER'));
    expect(audit.map((a) => [a.verb, a.actor, a.reason])).toEqual([
      ['limit.set', 'ops@example.com', 'ledger is degraded'],
      ['limit.reset', 'ops@example.com', 'recovered'],
    ]);
    expect(audit[0]!.before).toEqual({ source: 'config', limit: { concurrency: 8, rate: 50, burst: 10 } });
    expect(audit[0]!.after).toEqual({ source: 'override', limit: { concurrency: 2, rate: 5, burst: 1 } });
  });

  it('lists the instances waiting for a permit (none here) per env', async () => {
    const res = await api.app.inject({ method: 'GET', url: '/v1/envs/test-env/limits/waiting', headers: await bearer({ scope: 'flow:read' }) });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ items: [] });
  });
});
