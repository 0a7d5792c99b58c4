import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Api } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { openDb } from '../../engine/store/db.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { bearer, testApi } from './support.ts';

const ENV = 'surface-env';

describeEachDriver('the API surface', (getDb) => {
  let engine: Engine;
  let api: Api;
  let auth: { authorization: string };

  beforeAll(async () => {
    engine = new Engine({ db: getDb(), env: ENV, executors: { handlers: new Map() } });
    api = await testApi(engine);
    auth = await bearer({ envs: [ENV], scope: 'flow:admin' });
    for (const logicId of ['sf.one', 'sf.two']) {
      await engine.publishVersion(ENV, makeLogic({ logicId, start: 'a', steps: { a: { kind: 'decision', options: ['ok'] } } }));
    }
    await engine.publishVersion(ENV, makeLogic({ logicId: 'sf.one', version: 2, start: 'a', steps: { a: { kind: 'pass' } } }));
  });
  afterAll(async () => {
    await api.close();
    await engine.close();
  });

  it('GET /openapi.json is OpenAPI 3.1 generated from the contracts, with every route of the API contract', async () => {
    const doc = (await api.app.inject({ url: '/openapi.json' })).json();
    expect(doc.openapi).toBe('3.1.0');
    const paths = Object.entries(doc.paths as Record<string, Record<string, unknown>>).flatMap(([p, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${p}`));
    expect(paths.sort()).toEqual(
      [
        'GET /healthz',
        'GET /readyz',
        'GET /metrics',
        'POST /v1/envs/{env}/logic-versions',
        'GET /v1/envs/{env}/logic-versions',
        'GET /v1/envs/{env}/logic-versions/{logicId}/{version}',
        'PATCH /v1/envs/{env}/logic-versions/{logicId}/{version}',
        'POST /v1/envs/{env}/workflows',
        'GET /v1/envs/{env}/workflows',
        'GET /v1/envs/{env}/workflows/{id}',
        'GET /v1/envs/{env}/workflows/{id}/history',
        ...['retry', 'repair', 'cancel', 'force-complete', 'replay'].map((v) => `POST /v1/envs/{env}/workflows/{id}/${v}`),
        'POST /v1/envs/{env}/workflows/{id}/decisions/{step}',
        'POST /v1/envs/{env}/workflows/{id}/messages/{name}',
        'POST /v1/callbacks/{resumeToken}',
        'POST /v1/envs/{env}/events',
        // the console's and s8flow's routes beyond the API contract (engine/api/routes/: console-ui, overview, live, bulk)
        'GET /v1/envs/{env}/overview',
        'GET /v1/envs/{env}/handlers',
        'POST /v1/envs/{env}/logic-versions/{logicId}/compatibility',
        'GET /v1/envs/{env}/workflows/{id}/live',
        ...['retry', 'cancel', 'replay'].map((v) => `POST /v1/envs/{env}/bulk/${v}`),
        'GET /v1/envs/{env}/bulk/{jobId}',
        'POST /v1/envs/{env}/bulk/{jobId}/abort',
        // the migrate verb, a bulk job (engine/api/routes/migrations.ts)
        'POST /v1/envs/{env}/migrations',
        // legal hold, erasure and retention (engine/api/routes/history.ts)
        ...['hold', 'release-hold', 'erase'].map((v) => `POST /v1/envs/{env}/workflows/{id}/${v}`),
        'POST /v1/retention/run',
        // schedules (engine/api/routes/schedules.ts)
        'GET /v1/envs/{env}/schedules',
        'POST /v1/envs/{env}/schedules',
        'GET /v1/envs/{env}/schedules/{id}',
        'DELETE /v1/envs/{env}/schedules/{id}',
        ...['pause', 'resume', 'trigger', 'backfill'].map((v) => `POST /v1/envs/{env}/schedules/{id}/${v}`),
        // limits (engine/api/routes/limits.ts)
        'GET /v1/envs/{env}/limits',
        'GET /v1/envs/{env}/limits/waiting',
        'PUT /v1/envs/{env}/limits/{resource}',
        'DELETE /v1/envs/{env}/limits/{resource}',
      ].sort(),
    );
    // the request schema refuses unknown fields, and the document says so
    const start = doc.paths['/v1/envs/{env}/workflows'].post;
    expect(start.requestBody.content['application/json'].schema).toEqual({ $ref: '#/components/schemas/StartWorkflowRequestInput' });
    expect(doc.components.schemas.StartWorkflowRequestInput.additionalProperties).toBe(false);
    expect(start.parameters.map((p: { name: string }) => p.name)).toContain('idempotency-key');
  });

  it('GET /docs renders the document with a viewer served by the engine itself, no CDN', async () => {
    const page = await api.app.inject({ url: '/docs/' });
    expect(page.statusCode).toBe(200);
    expect(page.body).not.toMatch(/<script[^>]+src="https?:/);
    const script = await api.app.inject({ url: '/docs/static/swagger-ui-bundle.js' });
    expect(script.statusCode).toBe(200);
    expect(script.body.length).toBeGreaterThan(100_000);
  });

  it('/healthz and /readyz need no token; /metrics takes flow:metrics and is Prometheus text with flow_* series', async () => {
    expect((await api.app.inject({ url: '/healthz' })).json()).toEqual({ status: 'ok' });
    expect((await api.app.inject({ url: '/readyz' })).json()).toEqual({ status: 'ready' });
    const metrics = await api.app.inject({ url: '/metrics', headers: await bearer({ envs: ['*'], scope: 'flow:metrics' }) });
    expect(metrics.headers['content-type']).toMatch(/^text\/plain/);
    expect(metrics.body).toMatch(/^flow_runnable_instances \d+/m);
  });

  it('/readyz answers 503 FLOW_NOT_READY when the database does not answer', async () => {
    // a real pool pointed at a port where no server listens
    const gone = await openDb('postgres://flow@127.0.0.1:1/nothing', { poolSize: 1 });
    const broken = new Engine({ db: gone, env: ENV, executors: { handlers: new Map() } });
    const brokenApi = await testApi(broken);
    const res = await brokenApi.app.inject({ url: '/readyz' });
    expect(res.json()).toMatchObject({ status: 503, code: 'FLOW_NOT_READY' });
    await brokenApi.close();
    await gone.close();
  });

  it('lists versions with their active flag and in-flight count, shows one with its diagram, retires and reactivates', async () => {
    await engine.start({ logicId: 'sf.one', version: 1, input: {}, env: ENV });
    const list = (await api.app.inject({ url: `/v1/envs/${ENV}/logic-versions`, headers: auth })).json();
    expect(list.items.map((v: { logicId: string; version: number }) => `${v.logicId}@${v.version}`)).toEqual(['sf.one@1', 'sf.one@2', 'sf.two@1']);
    const one = (await api.app.inject({ url: `/v1/envs/${ENV}/logic-versions/sf.one/1`, headers: auth })).json();
    expect(one).toMatchObject({ logicId: 'sf.one', version: 1, active: true, inFlight: 1 });
    expect(one.diagram).toMatch(/^flowchart/);
    const retired = await api.app.inject({ method: 'PATCH', url: `/v1/envs/${ENV}/logic-versions/sf.one/1`, headers: auth, payload: { active: false } });
    expect(retired.json()).toMatchObject({ active: false, inFlight: 1 });
    const refused = await api.app.inject({ method: 'POST', url: `/v1/envs/${ENV}/workflows`, headers: auth, payload: { logicId: 'sf.one', version: 1, input: {} } });
    expect(refused.json()).toMatchObject({ status: 409, code: 'FLOW_VERSION_RETIRED' });
    await api.app.inject({ method: 'PATCH', url: `/v1/envs/${ENV}/logic-versions/sf.one/1`, headers: auth, payload: { active: true } });
  });

  it('lists workflows newest first with filters, a page at a time through an opaque cursor', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await engine.start({ logicId: 'sf.two', input: {}, env: ENV, correlationId: `c-${i % 2}` })).id);
    const page = async (query: string) => (await api.app.inject({ url: `/v1/envs/${ENV}/workflows?${query}`, headers: auth })).json();
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const p = await page(`logicId=sf.two&limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      seen.push(...p.items.map((i: { id: string }) => i.id));
      cursor = p.nextCursor;
      pages++;
    } while (cursor !== null);
    expect(pages).toBe(3);
    expect(seen).toEqual([...ids].reverse());
    expect((await page('correlationId=c-1')).items.map((i: { id: string }) => i.id)).toEqual([ids[3], ids[1]]);
    expect((await page('logicId=sf.one&version=2')).items).toEqual([]);
    expect((await page('state=waiting&logicId=sf.two')).items).toHaveLength(5);
    expect((await page('state=completed&logicId=sf.two')).items).toHaveLength(0);
    // stuck: runnable for longer than a minute (moved back in time here, not waited for)
    expect((await page('stuck=true')).items).toEqual([]);
    await asScheduler(getDb(), (c) =>
      c.query(`UPDATE workflows SET state = 'pending', run_at = now() - interval '2 minutes' WHERE id = $1`, [ids[0]]),
    );
    expect((await page('stuck=true')).items.map((i: { id: string }) => i.id)).toEqual([ids[0]]);
    expect((await page('stuck=true')).items[0]).toMatchObject({ stuckReason: 'pending_too_long' });
    // the overview lists it too, by the same definition, in its contract's shape
    const overview = await api.app.inject({ url: `/v1/envs/${ENV}/overview`, headers: auth });
    expect(overview.statusCode).toBe(200);
    expect(overview.json().stuck).toEqual([expect.objectContaining({ id: ids[0], reason: 'pending_too_long', logicId: 'sf.two' })]);
    // children of an instance: none here
    expect((await page(`parent=${ids[1]}`)).items).toEqual([]);
  });
});
