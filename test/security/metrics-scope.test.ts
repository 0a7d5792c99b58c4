import { afterAll, beforeAll, expect, it } from 'vitest';
import { type Api, buildApi } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { AUTH_SECRET, token } from '../api/support.ts';
import { describeEachDriver } from '../support/db.ts';

/** GET /metrics names every env's definitions: it takes an un-narrowed flow:metrics for every env, unless configured open. */
describeEachDriver('/metrics takes a token', (getDb) => {
  let engine: Engine;
  let api: Api;
  let open: Api;

  beforeAll(async () => {
    engine = new Engine({ db: getDb(), env: 'm-env', executors: { handlers: new Map() } });
    api = await buildApi({ engine, auth: { secret: AUTH_SECRET, production: false }, console: false });
    open = await buildApi({ engine, auth: { secret: AUTH_SECRET, production: false }, console: false, metricsOpen: true });
  });
  afterAll(async () => {
    await api.close();
    await open.close();
    await engine.close();
  });

  const scrape = async (claims: { envs: string[]; scope: string } | null, on = api) =>
    on.app.inject({ url: '/metrics', headers: claims === null ? {} : { authorization: `Bearer ${await token(claims)}` } });

  it('refuses no token, another scope, a narrowed scope and a token for some envs only', async () => {
    expect((await scrape(null)).json()).toMatchObject({ status: 401, code: 'FLOW_UNAUTHENTICATED' });
    expect((await scrape({ envs: ['*'], scope: 'flow:read' })).json()).toMatchObject({ status: 403, code: 'FLOW_SCOPE_MISSING' });
    expect((await scrape({ envs: ['*'], scope: 'flow:metrics:team-a.*' })).json()).toMatchObject({ status: 403, code: 'FLOW_SCOPE_MISSING' });
    expect((await scrape({ envs: ['m-env'], scope: 'flow:metrics' })).json()).toMatchObject({ status: 403, code: 'FLOW_ENV_FORBIDDEN' });
  });

  it('answers flow:metrics (or flow:admin) for every env, and anyone when configured open', async () => {
    for (const scope of ['flow:metrics', 'flow:admin']) {
      const res = await scrape({ envs: ['*'], scope });
      expect(res.statusCode, scope).toBe(200);
      expect(res.body).toMatch(/^flow_runnable_instances \d+/m);
    }
    expect((await scrape(null, open)).body).toMatch(/^flow_runnable_instances \d+/m);
  });
});
