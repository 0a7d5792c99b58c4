import { afterAll, beforeAll, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import type { Engine } from '../../engine/runtime/engine.ts';
import { advanceClock } from '../../engine/store/timers.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { describeEachDriver } from '../support/db.ts';
import { OPERATOR, testEngine, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';
import { testApi, bearer } from '../api/support.ts';

const ENV = 'test-env';
const MIN = 60_000;
const APPROVER = { subject: 'alice', scopes: ['flow:decide'] };

describeEachDriver('SLAs', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  beforeAll(async () => {
    svc = await new FakeService()
      .on('/down', () => ({ status: 503 }))
      .on('/later', () => ({ status: 202, body: { status: 'waiting' } }))
      .on('/ok', () => ({ status: 200, body: { ok: true } }))
      .listen();
    engine = testEngine(getDb(), svc);
  });
  afterAll(() => svc.close());

  const sql = async <T = Record<string, unknown>>(text: string, params: unknown[]) => (await getDb().pool.query(text, params)).rows as T[];
  /** The manual clock: every timer, backoff and outbox retry `ms` nearer; then what fell due runs (no backoff is skipped). */
  const tick = async (ms: number) => {
    await asScheduler(engine.db, (c) => advanceClock(c, ms));
    await engine.workers.drain();
  };
  async function start(logic: LogicVersion) {
    await engine.publish(logic, ENV);
    const { id } = await engine.start({ logicId: logic.logicId, input: {}, env: ENV });
    await engine.workers.drain();
    return id;
  }
  const breaches = (id: string) => sql<{ step: string; within: string }>('SELECT step, within FROM sla_breaches WHERE workflow_id = $1 ORDER BY step', [id]);
  const events = (id: string) =>
    sql<{ payload: Record<string, unknown>; idempotency_key: string }>(
      `SELECT payload, idempotency_key FROM outbox WHERE workflow_id = $1 AND topic = 'workflow.sla_breached'`,
      [id],
    );
  const counted = async (logicId: string, step = '') => {
    const line = (await engine.metrics.render()).body.split('\n').find((l) => l.startsWith(`flow_sla_breaches_total{env="${ENV}",logic_id="${logicId}",step="${step}"}`));
    return line === undefined ? 0 : Number(line.split(' ').at(-1));
  };

  const waitsOnDecision = (extra: Partial<LogicVersion> = {}, stepSla?: string) =>
    uniqueLogic({
      start: 'approve',
      steps: {
        approve: { kind: 'decision', options: ['yes'], next: 'done', ...(stepSla === undefined ? {} : { sla: { within: stepSla } }) },
        done: { kind: 'pass' },
      },
      ...extra,
    });

  it('an instance still waiting past its SLA breaches once: one row, one outbox event, one count', async () => {
    const logic = waitsOnDecision({ sla: { within: 'PT2H' } });
    const id = await start(logic);
    await tick(119 * MIN);
    expect(await breaches(id)).toEqual([]);
    await tick(2 * MIN);
    expect(await breaches(id)).toEqual([{ step: '', within: 'PT2H' }]);
    expect((await engine.get(id, ENV)).state).toBe('waiting');
    const [event, ...more] = await events(id);
    expect(more).toEqual([]);
    expect(event?.idempotency_key).toBe(`${id}:sla:`);
    expect(event?.payload).toMatchObject({ id, env: ENV, logicId: logic.logicId, version: 1, step: null, within: 'PT2H', state: 'waiting', currentStep: 'approve' });
    expect(await counted(logic.logicId)).toBe(1);
    await tick(24 * 60 * MIN);
    expect(await breaches(id)).toHaveLength(1);
    expect(await events(id)).toHaveLength(1);
    expect(await counted(logic.logicId)).toBe(1);
  });

  it('a step reached again after a repair arms its SLA again, and still breaches once', async () => {
    const logic = uniqueLogic({ start: 'approve', steps: { approve: { kind: 'decision', options: ['yes'], deadline: 'PT20M', sla: { within: 'PT10M' } } } });
    const id = await start(logic);
    await tick(11 * MIN);
    expect(await breaches(id)).toEqual([{ step: 'approve', within: 'PT10M' }]);
    await tick(10 * MIN);
    expect((await engine.get(id, ENV)).state).toBe('failed');
    await engine.ops.repair(id, { rewindTo: 'approve' }, { ...OPERATOR, env: ENV, reason: 'ask again' });
    await engine.workers.drain();
    expect(await sql(`SELECT 1 FROM timers WHERE workflow_id = $1 AND purpose = 'sla'`, [id])).toHaveLength(1);
    await tick(11 * MIN);
    expect(await sql(`SELECT 1 FROM timers WHERE workflow_id = $1 AND purpose = 'sla'`, [id])).toHaveLength(0);
    expect(await breaches(id)).toHaveLength(1);
    expect(await events(id)).toHaveLength(1);
    expect(await counted(logic.logicId, 'approve')).toBe(1);
  });

  it('two SLA timers of one step falling due in the same poll record one breach', async () => {
    const logic = waitsOnDecision({}, 'PT10M');
    const id = await start(logic);
    await sql(`INSERT INTO timers (env_id, id, workflow_id, purpose, fire_at, payload) SELECT env_id, gen_random_uuid(), workflow_id, purpose, fire_at, payload FROM timers WHERE workflow_id = $1`, [id]);
    expect(await sql(`SELECT 1 FROM timers WHERE workflow_id = $1 AND purpose = 'sla'`, [id])).toHaveLength(2);
    await tick(11 * MIN);
    expect(await breaches(id)).toHaveLength(1);
    expect(await events(id)).toHaveLength(1);
    expect(await counted(logic.logicId, 'approve')).toBe(1);
  });

  it('retrying time counts: a step still retrying past its SLA breaches', async () => {
    const logic = uniqueLogic({
      start: 'charge',
      steps: { charge: { kind: 'proxy', handler: 'test', path: '/down', sla: { within: 'PT10S' }, retry: { maxAttempts: 20, initialMs: 3000, factor: 1, maxMs: 3000 } } },
    });
    const id = await start(logic);
    for (let i = 0; i < 3; i++) await tick(4000);
    const r = await engine.get(id, ENV);
    expect(r.state).toBe('pending');
    expect(r.steps.length).toBeGreaterThanOrEqual(3);
    expect(await breaches(id)).toEqual([{ step: 'charge', within: 'PT10S' }]);
  });

  it('parked time counts: a step parked on a 202 past its SLA breaches', async () => {
    const logic = uniqueLogic({ start: 'ship', steps: { ship: { kind: 'proxy', handler: 'test', path: '/later', sla: { within: 'PT1H' } } } });
    const id = await start(logic);
    expect((await engine.get(id, ENV)).state).toBe('waiting');
    await tick(61 * MIN);
    expect(await breaches(id)).toEqual([{ step: 'ship', within: 'PT1H' }]);
  });

  it('an SLA timer says nothing about being stuck: a 202 parked too long is still callback_parked', async () => {
    const logic = uniqueLogic({ start: 'ship', steps: { ship: { kind: 'proxy', handler: 'test', path: '/later', sla: { within: 'PT1H' } } } });
    const id = await start(logic);
    // the SLA timer overdue and not yet fired (no poll since), the park two days old
    await sql(`UPDATE timers SET fire_at = now() - interval '1 minute' WHERE workflow_id = $1`, [id]);
    await sql(`UPDATE workflows SET updated_at = now() - interval '2 days' WHERE id = $1`, [id]);
    const stuck = await engine.ops.listStuck({ env: ENV });
    expect(stuck.filter((s) => s.id === id).map((s) => s.reason)).toEqual(['callback_parked']);
  });

  it('no breach when the instance, or the step, is done in time', async () => {
    const done = await start(waitsOnDecision({ sla: { within: 'PT1H' } }));
    await tick(30 * MIN);
    await engine.resume(done, { step: 'approve', option: 'yes', approver: APPROVER }, { env: ENV });
    await engine.workers.drain();
    expect((await engine.get(done, ENV)).state).toBe('completed');
    expect(await sql('SELECT 1 FROM timers WHERE workflow_id = $1', [done])).toEqual([]);
    await tick(2 * 60 * MIN);
    expect(await breaches(done)).toEqual([]);

    // the step answered in time; the instance waits on at the next step, past the step's SLA
    const logic = uniqueLogic({
      start: 'approve',
      steps: {
        approve: { kind: 'decision', options: ['yes'], next: 'countersign', sla: { within: 'PT1H' } },
        countersign: { kind: 'decision', options: ['yes'] },
      },
    });
    const moved = await start(logic);
    await tick(10 * MIN);
    await engine.resume(moved, { step: 'approve', option: 'yes', approver: APPROVER }, { env: ENV });
    await engine.workers.drain();
    await tick(2 * 60 * MIN);
    expect((await engine.get(moved, ENV)).currentStep).toBe('countersign');
    expect(await breaches(moved)).toEqual([]);
    expect(await events(moved)).toEqual([]);
  });

  it('breached instances are listed: the filter, the API and the overview', async () => {
    const logic = waitsOnDecision({ sla: { within: 'PT1M' } });
    const late = await start(logic);
    await tick(2 * MIN);
    const early = await start(logic);
    const listed = (await engine.ops.list({ logicId: logic.logicId, slaBreached: true }, { env: ENV })).map((r) => r.id);
    expect(listed).toEqual([late]);
    expect((await engine.ops.list({ logicId: logic.logicId, slaBreached: false }, { env: ENV })).map((r) => r.id)).toEqual([early]);
    const api = await testApi(engine);
    try {
      const headers = await bearer();
      const res = await api.app.inject({ method: 'GET', url: `/v1/envs/${ENV}/workflows?logicId=${logic.logicId}&slaBreached=true`, headers });
      expect(res.statusCode).toBe(200);
      expect(res.json().items.map((i: { id: string }) => i.id)).toEqual([late]);
      const overview = await api.app.inject({ method: 'GET', url: `/v1/envs/${ENV}/overview`, headers });
      expect(overview.statusCode).toBe(200);
      const sla = overview.json().slaBreaches;
      expect(sla.count).toBeGreaterThanOrEqual(1);
      expect(sla.recent.find((b: { id: string }) => b.id === late)).toMatchObject({ logicId: logic.logicId, step: null, within: 'PT1M' });
    } finally {
      await api.close();
    }
  });
});
