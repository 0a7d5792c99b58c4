import { afterAll, beforeAll, expect, it } from 'vitest';
import { createFlowClient } from '../../client/index.ts';
import type { Api } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle } from '../support/engine.ts';
import { bearer, testApi } from './support.ts';

const ENV = 'test-env';

/** `POST …/migrations`: the scope on the definition, the dry run, the job followed through the bulk routes, through the typed client too. */
describeEachDriver('migrations API', (getDb) => {
  let engine: Engine;
  let api: Api;
  const v = (version: number, next: string) =>
    makeLogic({
      logicId: 'payments.capture',
      version,
      start: 'approve',
      steps: { approve: { kind: 'decision', options: ['ok'], next }, ...(next === 'fraud' ? { fraud: { kind: 'pass', next: 'done' } } : {}), done: { kind: 'pass' } },
    });
  beforeAll(async () => {
    engine = new Engine({ db: getDb(), env: ENV });
    api = await testApi(engine);
    await engine.publish(v(1, 'done'), ENV);
    await engine.publish(v(2, 'fraud'), ENV);
    await engine.publish(v(3, 'done'), ENV);
    await engine.setVersionActive(ENV, 'payments.capture', 3, false);
  });
  afterAll(() => api.close());

  const post = async (body: object, scope: string) =>
    api.app.inject({ method: 'POST', url: `/v1/envs/${ENV}/migrations`, headers: await bearer({ scope }), payload: body });
  const body = (extra: object = {}) => ({ logicId: 'payments.capture', fromVersion: 1, toVersion: 2, reason: 'fraud check', ...extra });

  it('refuses without flow:migrate for the definition, and a token narrowed to another one, before anything is read', async () => {
    for (const scope of ['flow:read flow:retry', 'flow:migrate:orders.*']) {
      const res = await post(body({ dryRun: true }), scope);
      expect([res.statusCode, res.json().code]).toEqual([403, 'FLOW_SCOPE_MISSING']);
    }
    const bad = await post(body({ dryRun: true, toVersion: 1 }), 'flow:migrate:payments.*');
    expect([bad.statusCode, bad.json().code]).toEqual([422, 'FLOW_MIGRATE_BAD_TARGET']);
    const retired = await post(body({ dryRun: true, toVersion: 3 }), 'flow:migrate');
    expect([retired.statusCode, retired.json().code]).toEqual([409, 'FLOW_MIGRATE_TARGET_RETIRED']);
    expect((await post(body({ dryRun: true, toVersion: 3, allowRetired: true }), 'flow:migrate')).statusCode).toBe(200);
    const schema = await post(body({ renames: { approve: 'not a step name!' } }), 'flow:migrate');
    expect([schema.statusCode, schema.json().code]).toEqual([422, "FLOW_SCHEMA_INVALID"]);
  });

  it('previews per instance, then moves them in a job followed through the bulk routes, with flow:migrate narrowed to the definition', async () => {
    const { id } = await engine.start({ logicId: 'payments.capture', version: 1, input: {}, env: ENV });
    await settle(engine);
    const scope = 'flow:migrate:payments.* flow:read';
    const dry = await post(body({ dryRun: true }), scope);
    expect(dry.statusCode).toBe(200);
    expect(dry.json()).toMatchObject({
      dryRun: true,
      selected: 1,
      moves: 1,
      groups: [{ state: 'waiting', currentStep: 'approve', count: 1, representative: id, refusal: null, lands: { version: 2, step: 'approve' } }],
      items: [{ workflowId: id, lands: { version: 2, step: 'approve' } }],
      nextAfter: null,
    });
    const badPage = await post(body({ dryRun: true, pageSize: 0 }), scope);
    expect([badPage.statusCode, badPage.json().code]).toEqual([422, 'FLOW_SCHEMA_INVALID']);
    const started = await post(body({ ids: [id] }), scope);
    expect([started.statusCode, started.json().verb]).toEqual([202, 'migrate']);
    let job = started.json();
    for (let i = 0; i < 100 && job.state === 'running'; i++) {
      await new Promise((r) => setTimeout(r, 20));
      job = (await api.app.inject({ method: 'GET', url: `/v1/envs/${ENV}/bulk/${job.id}`, headers: await bearer({ scope }) })).json();
    }
    expect(job).toMatchObject({ state: 'done', done: 1, failed: 0, items: [{ workflowId: id, status: 'ok', state: 'waiting' }] });
    expect((await engine.get(id, ENV)).version).toBe(2);
  });

  it('the typed client previews and starts a migration; a refused instance is its job item with the code', async () => {
    const { id } = await engine.start({ logicId: 'payments.capture', version: 1, input: {}, env: ENV });
    await settle(engine);
    const auth = await bearer({ scope: 'flow:migrate flow:read' });
    const fetch = (async (url: string, init: RequestInit) => {
      const res = await api.app.inject({
        method: init.method as 'POST',
        url: new URL(url).pathname,
        headers: { ...(init.headers as Record<string, string>), ...auth },
        ...(init.body === undefined ? {} : { payload: init.body as string }),
      });
      return new Response(res.body, { status: res.statusCode, headers: { 'content-type': String(res.headers['content-type']) } });
    }) as typeof globalThis.fetch;
    const client = createFlowClient({ baseUrl: 'http://engine.test', env: ENV, fetch });
    const plan = await client.previewMigration(body({ ids: [id] }));
    expect(plan.items[0]?.next?.steps.map((s) => s.step)).toEqual(['fraud', 'done']);
    let job = await client.startMigration(body({ ids: [id, id] }));
    for (let i = 0; i < 100 && job.state === 'running'; i++) job = await client.bulkJob(job.id);
    // the repeated id is selected once
    expect(job).toMatchObject({ total: 1, done: 1, failed: 0 });
    job = await client.startMigration(body({ ids: [id] }));
    for (let i = 0; i < 100 && job.state === 'running'; i++) job = await client.bulkJob(job.id);
    expect(job.items[0]).toMatchObject({ status: 'failed', error: { code: 'FLOW_MIGRATE_WRONG_VERSION' } });
    await expect(client.previewMigration(body({ toVersion: 7 }))).rejects.toMatchObject({ code: 'FLOW_NOT_FOUND', status: 404 });
  });
});
