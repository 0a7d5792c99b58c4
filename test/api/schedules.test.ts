import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Api } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { closeTestDb, openTestDb } from '../support/db.ts';
import type { Db } from '../../engine/store/db.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { bearer, testApi } from './support.ts';

/** The schedules API: each act, its scope, its audit row, and no 500 on hostile input. */
describe('schedules API', () => {
  let db: Db;
  let engine: Engine;
  let api: Api;
  let now = new Date('2026-03-10T12:00:00Z');
  const base = '/v1/envs/test-env/schedules';
  const logic = makeLogic({ logicId: 'billing.run', start: 'done', steps: { done: { kind: 'pass' } }, schedules: [{ name: 'daily', cron: '0 6 * * *', timezone: 'Europe/Berlin' }] });
  beforeAll(async () => {
    db = await openTestDb('pglite');
    engine = new Engine({ db, env: 'test-env', clock: () => now });
    api = await testApi(engine);
    await engine.publish(logic, 'test-env');
  });
  afterAll(async () => {
    await api.close();
    await engine.close();
    await closeTestDb(db);
  });
  const call = async (method: 'GET' | 'POST' | 'DELETE', url: string, body?: unknown, scope = 'flow:admin') =>
    api.app.inject({ method, url, headers: await bearer({ scope }), ...(body === undefined ? {} : { payload: body as object }) });

  it('lists the declared schedule, and creates, pauses, resumes, triggers, backfills and deletes one of its own', async () => {
    const list = (await call('GET', base)).json();
    expect(list.items.map((s: { id: string }) => s.id)).toEqual(['billing.run:daily']);
    const created = await call('POST', base, { id: 'billing.hourly', logicId: 'billing.run', cron: '0 * * * *', overlap: 'allow', reason: 'load test' });
    expect(created.statusCode).toBe(201);
    expect(created.json()).toMatchObject({ id: 'billing.hourly', origin: 'api', nextAt: '2026-03-10T13:00:00.000Z', paused: false });
    expect((await call('POST', `${base}/billing.hourly/pause`, { reason: 'freeze' })).json()).toMatchObject({ paused: true });
    expect((await call('POST', `${base}/billing.hourly/resume`)).json()).toMatchObject({ paused: false });
    const trig = await call('POST', `${base}/billing.hourly/trigger`, {});
    expect(trig.statusCode).toBe(201);
    const dry = (await call('POST', `${base}/billing.hourly/backfill`, { from: '2026-03-10T09:00:00Z', to: '2026-03-10T11:00:00Z', dryRun: true })).json();
    expect(dry.ticks.map((t: { tickAt: string }) => t.tickAt)).toEqual(['2026-03-10T09:00:00.000Z', '2026-03-10T10:00:00.000Z', '2026-03-10T11:00:00.000Z']);
    const real = (await call('POST', `${base}/billing.hourly/backfill`, { from: '2026-03-10T09:00:00Z', to: '2026-03-10T11:00:00Z' })).json();
    expect(real.ticks.filter((t: { created: boolean }) => t.created)).toHaveLength(3);
    const detail = (await call('GET', `${base}/billing.hourly`)).json();
    expect(detail.ticks.map((t: { via: string }) => t.via).sort()).toEqual(['backfill', 'backfill', 'backfill', 'trigger']);
    expect((await call('DELETE', `${base}/billing.hourly`)).json()).toEqual({ id: 'billing.hourly', deleted: true });
    expect((await call('GET', `${base}/billing.hourly`)).statusCode).toBe(404);
    const audit = await db.pool.query(`SELECT verb, actor FROM audit WHERE schedule_id = 'billing.hourly' ORDER BY id`);
    expect(audit.rows.map((r) => r.verb)).toEqual([
      'schedule.create',
      'schedule.pause',
      'schedule.resume',
      'schedule.trigger',
      'schedule.backfill',
      'schedule.delete',
    ]);
    expect(audit.rows.every((r) => r.actor === 'alice')).toBe(true);
  });

  it('reading needs flow:read; acting needs flow:start for the definition; a declared schedule cannot be deleted', async () => {
    expect((await call('GET', base, undefined, 'flow:read')).statusCode).toBe(200);
    expect((await call('POST', `${base}/billing.run:daily/pause`, {}, 'flow:read')).statusCode).toBe(403);
    expect((await call('POST', `${base}/billing.run:daily/pause`, {}, 'flow:start:billing.*')).statusCode).toBe(200);
    expect((await call('POST', `${base}/billing.run:daily/resume`, {}, 'flow:start:other.*')).statusCode).toBe(404);
    expect((await call('GET', `${base}/billing.run:daily`, undefined, 'flow:read:other.*')).statusCode).toBe(404);
    expect((await call('GET', base, undefined, 'flow:read:other.*')).json().items).toEqual([]);
    // another env's schedule is missing there, as an instance is
    const elsewhere = await api.app.inject({ method: 'POST', url: '/v1/envs/other-env/schedules/billing.run:daily/trigger', headers: await bearer({ envs: ['*'] }), payload: {} });
    expect(elsewhere.statusCode).toBe(404);
    expect((await api.app.inject({ url: '/v1/envs/other-env/schedules', headers: await bearer({ envs: ['*'] }) })).json().items).toEqual([]);
    const del = await call('DELETE', `${base}/billing.run:daily`);
    expect(del.statusCode).toBe(409);
    expect(del.json().code).toBe('FLOW_SCHEDULE_DECLARED');
  });

  it('refuses bad patterns, zones, ranges and ids with problem+json, never 500', async () => {
    const bad = [
      { id: 'x1', logicId: 'billing.run', cron: '99 * * * *' },
      { id: 'x2', logicId: 'billing.run', cron: '0 * * * *', timezone: 'Nowhere/City' },
      { id: 'x3', logicId: 'billing.run', cron: '0 * * * *', catchUp: 'soon' },
      { id: 'x\u0000', logicId: 'billing.run', cron: '0 * * * *' },
      { id: 'x4', logicId: 'missing.flow', cron: '0 * * * *' },
    ];
    const codes = [];
    for (const body of bad) {
      const res = await call('POST', base, body);
      expect(res.statusCode).toBeLessThan(500);
      expect(res.headers['content-type']).toMatch(/problem\+json/);
      codes.push(res.json().code);
    }
    expect(codes).toEqual(['FLOW_SCHEDULE_INVALID', 'FLOW_SCHEDULE_INVALID', 'FLOW_SCHEMA_INVALID', 'FLOW_SCHEMA_INVALID', 'FLOW_NOT_FOUND']);
    expect((await call('POST', base, { id: 'billing.run:daily', logicId: 'billing.run', cron: '0 * * * *' })).json().code).toBe('FLOW_SCHEDULE_EXISTS');
    const huge = await call('POST', `${base}/billing.run:daily/backfill`, { from: '2020-01-01T00:00:00Z', to: '2026-01-01T00:00:00Z' });
    expect(huge.statusCode).toBe(422);
    expect(huge.json().code).toBe('FLOW_SCHEDULE_INVALID');
    now = new Date(now.getTime() + 1);
  });
});
