import { afterAll, beforeAll, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import type { Engine } from '../../engine/runtime/engine.ts';
import { effectsParam } from '../../engine/store/commit-transition.ts';
import { begin } from '../../engine/core/flow.ts';
import { createInstance } from '../../engine/core/instance.ts';
import { bearer, testApi } from '../api/support.ts';
import { exportTrace, replay } from '../../engine/testing/index.ts';
import { describeEachDriver } from '../support/db.ts';
import { OPERATOR, settle, testEngine, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

const ENV = 'test-env';

describeEachDriver('search attributes', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  beforeAll(async () => {
    svc = await new FakeService()
      .on('/settle', (req) => ({ status: 200, body: { at: (req.body as { at: string }).at } }))
      .listen();
    engine = testEngine(getDb(), svc);
  });
  afterAll(() => svc.close());

  const payment = (extra: Partial<LogicVersion> = {}) =>
    uniqueLogic({
      start: 'settle',
      attributes: {
        accountId: { value: 'input.accountId' },
        amount: { value: 'input.amount' },
        dueAt: { type: 'time', value: 'input.dueAt' },
        settledAt: { type: 'time' },
      },
      steps: {
        settle: { kind: 'proxy', handler: 'test', path: '/settle', input: '{ "at": input.settleAt }', attributes: { settledAt: 'output.at' } },
      },
      ...extra,
    });

  async function run(logic: LogicVersion, input: Record<string, unknown>) {
    const { id } = await engine.start({ logicId: logic.logicId, input, env: ENV });
    await settle(engine);
    return id;
  }
  const ids = async (filter: Parameters<Engine['ops']['list']>[0]) => (await engine.ops.list(filter, { env: ENV, limit: 500 })).map((r) => r.id).sort();

  let logic: LogicVersion;
  const started: Record<string, string> = {};
  beforeAll(async () => {
    logic = payment();
    await engine.publish(logic, ENV);
    for (const [k, accountId, amount, settleAt] of [
      ['a', 'acct-1', 50, '2026-01-01T10:00:00Z'],
      ['b', 'acct-2', 100, '2026-01-02T10:00:00+02:00'],
      ['c', 'acct-2', 499.5, '2026-01-03T10:00:00Z'],
      ['d', 'acct-3', 500, '2026-01-04T10:00:00Z'],
    ] as const) {
      started[k] = await run(logic, { accountId, amount, dueAt: '2026-02-01T00:00:00Z', settleAt });
    }
  });

  it('filters by one attribute set at the start, by equality', async () => {
    expect(await ids({ logicId: logic.logicId, attributes: { accountId: 'acct-2' } })).toEqual([started['b'], started['c']].sort());
    expect(await ids({ attributes: { accountId: 'acct-9' } })).toEqual([]);
  });

  it('the record shows its attributes, a time in UTC; a record without any has no field', async () => {
    const r = await engine.get(started['b']!, ENV);
    expect(r.attributes).toEqual({ accountId: 'acct-2', amount: 100, dueAt: '2026-02-01T00:00:00.000Z', settledAt: '2026-01-02T08:00:00.000Z' });
  });

  it('filters numbers and times by range, compared as numbers and instants, not as text', async () => {
    // as text, '500' < '99' and '100' < '50'
    expect(await ids({ logicId: logic.logicId, attributes: { 'amount.gte': '100', 'amount.lt': '500' } })).toEqual([started['b'], started['c']].sort());
    expect(await ids({ logicId: logic.logicId, attributes: { amount: '500' } })).toEqual([started['d']]);
    // set by the step from its output; +02:00 is stored as the instant it names
    expect(await ids({ logicId: logic.logicId, attributes: { 'settledAt.lt': '2026-01-02T09:00:00Z' } })).toEqual([started['a'], started['b']].sort());
    expect(await ids({ logicId: logic.logicId, attributes: { settledAt: '2026-01-02T08:00:00.000Z' } })).toEqual([started['b']]);
    expect(await ids({ logicId: logic.logicId, attributes: { accountId: 'acct-2', 'settledAt.gte': '2026-01-03T00:00:00Z' } })).toEqual([started['c']]);
  });

  it('the attributes each commit set are journalled, and an exported trace replays through the core to the same end', async () => {
    const trace = await exportTrace(engine, ENV, started['c']!);
    const set = trace.entries.map((e) => (e.decision as { attributes?: unknown }).attributes).filter((a) => a !== undefined);
    expect(set).toEqual([
      { accountId: { type: 'string', value: 'acct-2' }, amount: { type: 'number', value: 499.5 }, dueAt: { type: 'time', value: '2026-02-01T00:00:00.000Z' } },
      { settledAt: { type: 'time', value: '2026-01-03T10:00:00.000Z' } },
    ]);
    expect((await replay(logic, trace)).state).toBe('completed');
    // a replay whose core decided other attributes is caught
    const tampered = structuredClone(trace);
    (tampered.entries.at(-1)!.decision as { attributes: Record<string, unknown> }).attributes = { settledAt: { type: 'time', value: '2027-01-01T00:00:00.000Z' } };
    await expect(replay(logic, tampered)).rejects.toThrow();
  });

  it('a value the declared type refuses fails the start, naming the attribute', async () => {
    const id = await run(logic, { accountId: 'acct-4', amount: 1, dueAt: 'next tuesday', settleAt: '2026-01-01T00:00:00Z' });
    const r = await engine.get(id, ENV);
    expect(r.state).toBe('failed');
    expect(r.error).toMatchObject({ code: 'FLOW_ATTRIBUTE_INVALID' });
    expect(r.error?.message).toContain('dueAt');
    expect(svc.calls('/settle').filter((c) => (c.body as { at: string }).at === '2026-01-01T00:00:00Z')).toHaveLength(0);

    // a repair that replaces the workflow input sets the start's attributes from it
    await engine.ops.repair(
      id,
      { rewindTo: 'settle', input: { accountId: 'acct-4', amount: 7, dueAt: '2026-03-01T00:00:00Z', settleAt: '2026-01-01T00:00:00Z' } },
      { ...OPERATOR, env: ENV, reason: 'due date fixed' },
    );
    await settle(engine);
    expect((await engine.get(id, ENV)).state).toBe('completed');
    expect((await engine.get(id, ENV)).attributes).toMatchObject({ accountId: 'acct-4', amount: 7, dueAt: '2026-03-01T00:00:00.000Z' });
    expect(await ids({ attributes: { accountId: 'acct-4' } })).toEqual([id]);
  });

  it('a step output the attribute refuses fails the step for good (its effect kept for compensation)', async () => {
    const id = await run(logic, { accountId: 'acct-5', amount: 1, dueAt: '2026-02-01T00:00:00Z', settleAt: 'soon' });
    const r = await engine.get(id, ENV);
    expect(r.state).toBe('failed');
    expect(r.error).toMatchObject({ code: 'FLOW_ATTRIBUTE_INVALID', step: 'settle' });
    expect(r.steps).toHaveLength(1);
  });

  it('a definition without attributes commits no attribute key and writes no row', async () => {
    const plain = uniqueLogic({ start: 'settle', steps: { settle: { kind: 'proxy', handler: 'test', path: '/settle', input: '{ "at": "x" }' } } });
    const t = await begin(plain, createInstance(plain, { id: '00000000-0000-4000-8000-000000000001', env: ENV, input: {}, correlationId: null }));
    expect('attributes' in effectsParam(t, {})).toBe(false);
    await engine.publish(plain, ENV);
    const id = await run(plain, {});
    const rows = await getDb().pool.query('SELECT count(*)::int AS n FROM workflow_attributes WHERE workflow_id = $1', [id]);
    expect(rows.rows[0].n).toBe(0);
    expect('attributes' in (await engine.get(id, ENV))).toBe(false);
  });

  it('the API filters by attr.<name> and attr.<name>.<op>, refuses other parameters, and bulk filters the same', async () => {
    const api = await testApi(engine);
    try {
      const headers = await bearer();
      const list = (qs: string) => api.app.inject({ method: 'GET', url: `/v1/envs/${ENV}/workflows?logicId=${logic.logicId}&${qs}`, headers });
      const eq = await list('attr.accountId=acct-2');
      expect(eq.statusCode).toBe(200);
      expect(eq.json().items.map((i: { id: string }) => i.id).sort()).toEqual([started['b'], started['c']].sort());
      const range = await list('attr.amount.gte=100&attr.amount.lt=500');
      expect(range.json().items).toHaveLength(2);
      for (const bad of ['attr.amount.between=1', 'color=red', 'attr.=x', 'attr.accountId=%00', 'attr.accountId=a&attr.accountId=b', `attr.accountId=${'x'.repeat(300)}`]) {
        const res = await list(bad);
        expect(res.statusCode, bad).toBeGreaterThanOrEqual(400);
        expect(res.statusCode, bad).toBeLessThan(500);
      }
      const bulk = await api.app.inject({
        method: 'POST',
        url: `/v1/envs/${ENV}/bulk/cancel`,
        headers,
        payload: { filter: { logicId: logic.logicId, attributes: { accountId: 'acct-2' } }, reason: 'preview', dryRun: true },
      });
      expect(bulk.statusCode).toBe(200);
      expect(bulk.json().count).toBe(2);
    } finally {
      await api.close();
    }
  });
});
