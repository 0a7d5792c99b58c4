import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Api } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { bearer, testApi } from './support.ts';

const ENV = 'history-env';

/** Legal hold, erasure and the retention run over HTTP: their scopes, their envs, their answers. */
describeEachDriver('history routes', (getDb) => {
  let engine: Engine;
  let api: Api;
  let ended: string;
  let other: string;

  beforeAll(async () => {
    engine = new Engine({ db: getDb(), env: ENV, executors: { handlers: new Map() }, retention: { days: 30, envDays: {} } });
    api = await testApi(engine);
    for (const env of [ENV, 'other-env']) await engine.publishVersion(env, makeLogic({ logicId: 'hr.done', start: 'a', steps: { a: { kind: 'pass' } } }));
    ended = (await engine.start({ logicId: 'hr.done', input: { name: 'Ada' }, env: ENV })).id;
    other = (await engine.start({ logicId: 'hr.done', input: { name: 'Bob' }, env: 'other-env' })).id;
  });
  afterAll(async () => {
    await api.close();
    await engine.close();
  });

  const post = async (url: string, claims: { envs?: string[]; scope: string }, payload: object = { reason: 'asked' }) =>
    api.app.inject({ method: 'POST', url, headers: await bearer({ envs: [ENV], ...claims }), payload });

  it('hold and release need flow:admin; erase needs flow:erase; an id of another env is a 404', async () => {
    expect((await post(`/v1/envs/${ENV}/workflows/${ended}/hold`, { scope: 'flow:cancel flow:erase' })).json()).toMatchObject({ status: 403, code: 'FLOW_SCOPE_MISSING' });
    expect((await post(`/v1/envs/${ENV}/workflows/${ended}/hold`, { scope: 'flow:admin' })).statusCode).toBe(200);
    expect((await post(`/v1/envs/${ENV}/workflows/${ended}/erase`, { scope: 'flow:erase' })).json()).toMatchObject({ status: 409, code: 'FLOW_INSTANCE_HELD' });
    expect((await post(`/v1/envs/${ENV}/workflows/${ended}/release-hold`, { scope: 'flow:admin' })).statusCode).toBe(200);
    expect((await post(`/v1/envs/${ENV}/workflows/${ended}/erase`, { scope: 'flow:replay flow:cancel' })).json()).toMatchObject({ status: 403, code: 'FLOW_SCOPE_MISSING' });
    const erased = await post(`/v1/envs/${ENV}/workflows/${ended}/erase`, { scope: 'flow:erase' });
    expect(erased.json()).toMatchObject({ state: 'completed', input: { $erased: true } });
    expect((await post(`/v1/envs/${ENV}/workflows/${other}/erase`, { envs: ['*'], scope: 'flow:erase' })).json()).toMatchObject({ status: 404, code: 'FLOW_NOT_FOUND' });
    expect((await post(`/v1/envs/${ENV}/workflows/${ended}/erase`, { scope: 'flow:erase' }, {})).statusCode).toBe(422);
    const replay = await post(`/v1/envs/${ENV}/workflows/${ended}/replay`, { scope: 'flow:admin' }, { reason: 'again', step: 'a' });
    expect(replay.json()).toMatchObject({ status: 409, code: 'FLOW_INSTANCE_ERASED' });
  });

  it('an erased instance that ended with an error (cancelled, failed) still reads back over the API: the error keeps its code', async () => {
    await engine.publishVersion(ENV, makeLogic({ logicId: 'hr.asks', start: 'ask', steps: { ask: { kind: 'decision', options: ['ok'] } } }));
    const { id } = await engine.start({ logicId: 'hr.asks', input: { name: 'Cy' }, env: ENV });
    expect((await post(`/v1/envs/${ENV}/workflows/${id}/cancel`, { scope: 'flow:cancel' })).statusCode).toBe(200);
    expect((await post(`/v1/envs/${ENV}/workflows/${id}/erase`, { scope: 'flow:erase' })).statusCode).toBe(200);
    const read = await api.app.inject({ url: `/v1/envs/${ENV}/workflows/${id}`, headers: await bearer({ envs: [ENV], scope: 'flow:read' }) });
    expect(read.statusCode).toBe(200);
    expect(read.json().error).toMatchObject({ code: 'CANCELLED', message: expect.stringContaining('erased') });
    expect(JSON.stringify(read.json())).not.toContain('Cy');
    const list = await api.app.inject({ url: `/v1/envs/${ENV}/workflows`, headers: await bearer({ envs: [ENV], scope: 'flow:read' }) });
    expect(list.statusCode).toBe(200);
  });

  it('a retention run spans every env: it needs flow:admin un-narrowed and a token for every env', async () => {
    expect((await post('/v1/retention/run', { scope: 'flow:admin' }, { dryRun: true })).json()).toMatchObject({ status: 403, code: 'FLOW_ENV_FORBIDDEN' });
    expect((await post('/v1/retention/run', { envs: ['*'], scope: 'flow:admin:hr.*' }, { dryRun: true })).json()).toMatchObject({ status: 403, code: 'FLOW_SCOPE_MISSING' });
    const res = await post('/v1/retention/run', { envs: ['*'], scope: 'flow:admin' }, { dryRun: true });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ dryRun: true, instancesRemoved: 0, partitionsDropped: [] });
  });
});
