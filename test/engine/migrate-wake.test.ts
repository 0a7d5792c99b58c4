import { afterAll, beforeAll, expect, it } from 'vitest';
import type { StepDef } from '../../contracts/index.ts';
import { BulkJobs } from '../../engine/runtime/bulk-jobs.ts';
import type { Engine } from '../../engine/runtime/engine.ts';
import { advanceClock, fireDueTimers } from '../../engine/store/timers.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { advance, settle, testEngine } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

const ENV = 'test-env';
const OPS = { subject: 'ops@example.com', scopes: ['flow:admin'] };
const DECIDER = { subject: 'approver@example.com', scopes: ['flow:decide'] };
const SENDER = { subject: 'ledger', scopes: ['flow:signal'] };
const HOUR = 3_600_000;

let counter = 0;

/**
 * Every way an instance parks, moved to a later version — with the step it is parked on kept or
 * renamed — and then woken the way it waits to be (its timer fired, its decision answered, its
 * message sent): it must run to its end on the target, through the step the target added.
 *
 * Each definition is `<park step> → done`, and its targets add `extra` between them; the renamed
 * target names the park step `<name>2`.
 */
describeEachDriver('a parked instance, migrated, wakes and runs to its end on the target', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  beforeAll(async () => {
    svc = await new FakeService().on('/ok', () => ({ status: 200, body: { ok: true } })).listen();
    engine = testEngine(getDb(), svc);
  });
  afterAll(() => svc.close());

  /** v1: `park → done`; v2: `park → extra → done`; v3 as v2 with `park` renamed `<park>2`. */
  async function publish(park: string, def: StepDef, extra: Record<string, StepDef> = {}) {
    const logicId = `t.wake${++counter}`;
    const renamed = `${park}2`;
    const v = (version: number, steps: Record<string, StepDef>, start = park) => makeLogic({ logicId, version, start, steps: { ...steps, ...extra } });
    const v1 = v(1, { [park]: { ...def, next: 'done' } as StepDef, done: { kind: 'pass' } });
    const v2 = v(2, { [park]: { ...def, next: 'extra' } as StepDef, extra: { kind: 'pass', next: 'done' }, done: { kind: 'pass' } });
    const v3 = v(3, { [renamed]: { ...def, next: 'extra' } as StepDef, extra: { kind: 'pass', next: 'done' }, done: { kind: 'pass' } }, renamed);
    for (const doc of [v1, v2, v3]) await engine.publish(doc, ENV);
    return { logicId, renamed };
  }

  async function started(logicId: string, step: string) {
    const { id } = await engine.start({ logicId, version: 1, input: {}, env: ENV });
    await settle(engine);
    expect(await engine.get(id, ENV)).toMatchObject({ state: 'waiting', currentStep: step, version: 1 });
    return id;
  }

  async function migrate(logicId: string, id: string, toVersion: number, renames: Record<string, string> = {}) {
    const bulk = new BulkJobs(getDb(), engine.ops);
    const job = await bulk.startMigration(ENV, { logicId, fromVersion: 1, toVersion, ids: [id], renames, reason: 'wake test' }, OPS);
    await bulk.settled();
    return (await bulk.get(ENV, job.id)).items[0]!;
  }

  /** Completed on the target, through `through` (by default the step the target added). */
  async function endsOnTarget(id: string, version: number, through = 'extra') {
    const rec = await engine.get(id, ENV);
    expect(rec).toMatchObject({ state: 'completed', version });
    expect(rec.steps.map((s) => s.step)).toContain(through);
  }

  const targets = [
    { name: 'kept', version: 2, rename: false },
    { name: 'renamed', version: 3, rename: true },
  ];

  for (const t of targets) {
    it(`parked on a delay (step ${t.name}): its timer fires after the move`, async () => {
      const { logicId, renamed } = await publish('wait', { kind: 'delay', duration: 'PT1H' });
      const id = await started(logicId, 'wait');
      expect(await migrate(logicId, id, t.version, t.rename ? { wait: renamed } : {})).toMatchObject({ status: 'ok', state: 'waiting' });
      await advance(engine, HOUR + 1_000);
      await endsOnTarget(id, t.version);
    });

    it(`parked on a decision (step ${t.name}): answered after the move under the step's name on the target`, async () => {
      const { logicId, renamed } = await publish('approval', { kind: 'decision', options: ['approve'] });
      const id = await started(logicId, 'approval');
      expect(await migrate(logicId, id, t.version, t.rename ? { approval: renamed } : {})).toMatchObject({ status: 'ok' });
      await engine.resume(id, { step: t.rename ? renamed : 'approval', option: 'approve', approver: DECIDER }, { env: ENV });
      await settle(engine);
      await endsOnTarget(id, t.version);
    });

    it(`parked on a decision with a deadline (step ${t.name}): the deadline fires after the move and takes onTimeout`, async () => {
      const timedOut: StepDef = { kind: 'pass', next: 'done' };
      const { logicId, renamed } = await publish('approval', { kind: 'decision', options: ['approve'], deadline: 'PT1H', onTimeout: 'timedOut' } as StepDef, { timedOut });
      const id = await started(logicId, 'approval');
      expect(await migrate(logicId, id, t.version, t.rename ? { approval: renamed } : {})).toMatchObject({ status: 'ok' });
      await advance(engine, HOUR + 1_000);
      await endsOnTarget(id, t.version, 'timedOut');
    });

    it(`parked on a waitFor (step ${t.name}): the message sent after the move is taken`, async () => {
      const { logicId, renamed } = await publish('settled', { kind: 'waitFor', message: 'funds.settled' });
      const id = await started(logicId, 'settled');
      expect(await migrate(logicId, id, t.version, t.rename ? { settled: renamed } : {})).toMatchObject({ status: 'ok' });
      await engine.deliverMessage(id, { name: 'funds.settled', payload: { ref: 'L-1' }, key: `settle-${id}`, sender: SENDER }, { env: ENV });
      await settle(engine);
      await endsOnTarget(id, t.version);
      // the attempt row keeps the name it was made under (docs/versions.md, "The rename map"); the output is the message's
      expect((await engine.get(id, ENV)).steps.find((s) => s.step === 'settled')?.output).toEqual({ ref: 'L-1' });
    });

    it(`parked on a decision with a message already buffered for the waitFor after it (waitFor ${t.name}): the message is taken after the move`, async () => {
      const logicId = `t.wake${++counter}`;
      const settle2 = t.rename ? 'settlement' : 'settle';
      const approval: StepDef = { kind: 'decision', options: ['approve'], next: 'settle' };
      const v1 = makeLogic({ logicId, version: 1, start: 'approval', steps: { approval, settle: { kind: 'waitFor', message: 'funds.settled', next: 'done' }, done: { kind: 'pass' } } });
      const target = makeLogic({
        logicId,
        version: 2,
        start: 'approval',
        steps: { approval: { ...approval, next: settle2 }, [settle2]: { kind: 'waitFor', message: 'funds.settled', next: 'extra' }, extra: { kind: 'pass', next: 'done' }, done: { kind: 'pass' } },
      });
      for (const doc of [v1, target]) await engine.publish(doc, ENV);
      const id = await started(logicId, 'approval');
      await engine.deliverMessage(id, { name: 'funds.settled', payload: { ref: 'L-2' }, key: `early-${id}`, sender: SENDER }, { env: ENV });
      expect(await migrate(logicId, id, 2, t.rename ? { settle: settle2 } : {})).toMatchObject({ status: 'ok' });
      await engine.resume(id, { step: 'approval', option: 'approve', approver: DECIDER }, { env: ENV });
      await settle(engine);
      await endsOnTarget(id, 2);
      expect((await engine.get(id, ENV)).steps.find((s) => s.step === settle2)?.output).toEqual({ ref: 'L-2' });
    });

    it(`parked on a decision with an SLA (step ${t.name}): the SLA timer still breaches on the step after the move`, async () => {
      const { logicId, renamed } = await publish('approval', { kind: 'decision', options: ['approve'], sla: { within: 'PT30M' } } as StepDef);
      const id = await started(logicId, 'approval');
      expect(await migrate(logicId, id, t.version, t.rename ? { approval: renamed } : {})).toMatchObject({ status: 'ok' });
      await advance(engine, HOUR);
      const breaches = await getDb().pool.query<{ step: string }>('SELECT step FROM sla_breaches WHERE workflow_id = $1', [id]);
      expect(breaches.rows).toEqual([{ step: t.rename ? renamed : 'approval' }]);
      await engine.resume(id, { step: t.rename ? renamed : 'approval', option: 'approve', approver: DECIDER }, { env: ENV });
      await settle(engine);
      await endsOnTarget(id, t.version);
    });
  }

  it('held by a throttling service (pending, no attempt used): moves in its hold, and the call it retries after the hold ends it on the target', async () => {
    let busy = true;
    svc.on('/busy', () => (busy ? { status: 429, headers: { 'retry-after': '3600' }, body: {} } : { status: 200, body: { ok: true } }));
    const { logicId } = await publish('call', { kind: 'proxy', handler: 'test', path: '/busy', retry: { maxAttempts: 2, initialMs: 1_000 } } as StepDef);
    const { id } = await engine.start({ logicId, version: 1, input: {}, env: ENV });
    await engine.workers.drain();
    expect(await engine.get(id, ENV)).toMatchObject({ state: 'pending', currentStep: 'call' });
    expect(await migrate(logicId, id, 2)).toMatchObject({ status: 'ok', state: 'pending' });
    busy = false;
    await settle(engine);
    await endsOnTarget(id, 2);
    expect(new Set(svc.calls('/busy').map((r) => r.headers['idempotency-key']))).toEqual(new Set([`${id}:call:0`]));
  });

  it('a waiting instance a worker holds (its timer fired and leased it) is refused, retryable, and runs on where it is', async () => {
    const { logicId } = await publish('wait', { kind: 'delay', duration: 'PT1H' });
    const id = await started(logicId, 'wait');
    // the timer fires and leases the instance, as a timer poll hands it to its worker
    await asScheduler(engine.db, (c) => advanceClock(c, HOUR + 1_000));
    const fired = await fireDueTimers(engine.db.pool, 100, { limit: 100, leaseMs: 60_000 });
    expect(fired.leased.map((w) => w.instance.id)).toContain(id);
    expect((await engine.get(id, ENV)).state).toBe('waiting');
    const plan = await engine.ops.migrations.preview({ logicId, fromVersion: 1, toVersion: 2, ids: [id], reason: 'x' }, OPS, { env: ENV });
    expect(plan.items[0]?.refusal).toMatchObject({ code: 'FLOW_MIGRATE_PROCESSING', retryable: true });
    expect(await migrate(logicId, id, 2)).toMatchObject({ status: 'failed', error: { code: 'FLOW_MIGRATE_PROCESSING' } });
    // the worker's lease runs out (it was never run here): the instance is reclaimed and ends on v1
    await asScheduler(engine.db, (c) => c.query(`UPDATE workflows SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, [id]));
    await settle(engine);
    expect(await engine.get(id, ENV)).toMatchObject({ state: 'completed', version: 1 });
  });

  it('refuses to strand a buffered message: the target no longer waits for it after where the instance lands (FLOW_COMPAT_MESSAGE_UNTAKEN)', async () => {
    const logicId = `t.wake${++counter}`;
    const approval: StepDef = { kind: 'decision', options: ['approve'], next: 'settle' };
    const v1 = makeLogic({ logicId, version: 1, start: 'approval', steps: { approval, settle: { kind: 'waitFor', message: 'funds.settled', next: 'done' }, done: { kind: 'pass' } } });
    // the step renamed, and waiting for another message: the buffered one would never be taken
    const v2 = makeLogic({
      logicId,
      version: 2,
      start: 'approval',
      steps: { approval: { ...approval, next: 'settlement' }, settlement: { kind: 'waitFor', message: 'ledger.settled', next: 'done' }, done: { kind: 'pass' } },
    });
    for (const doc of [v1, v2]) await engine.publish(doc, ENV);
    const id = await started(logicId, 'approval');
    const other = await started(logicId, 'approval');
    await engine.deliverMessage(id, { name: 'funds.settled', payload: { ref: 'L-3' }, key: `early-${id}`, sender: SENDER }, { env: ENV });
    const req = { logicId, fromVersion: 1, toVersion: 2, ids: [id, other], renames: { settle: 'settlement' }, reason: 'x', dryRun: true };
    const plan = await engine.ops.migrations.preview(req, OPS, { env: ENV });
    expect(plan.items.map((i) => [i.workflowId, i.refusal?.code ?? null, i.refusal?.reasons.map((r) => r.code) ?? []])).toEqual([
      [id, 'FLOW_MIGRATE_UNSAFE', ['FLOW_COMPAT_MESSAGE_UNTAKEN']],
      // with nothing buffered, the same instance moves
      [other, null, []],
    ]);
    expect(await migrate(logicId, id, 2, { settle: 'settlement' })).toMatchObject({ status: 'failed', error: { code: 'FLOW_MIGRATE_UNSAFE' } });
    expect((await engine.get(id, ENV)).version).toBe(1);
    await engine.resume(id, { step: 'approval', option: 'approve', approver: DECIDER }, { env: ENV });
    await settle(engine);
    expect(await engine.get(id, ENV)).toMatchObject({ state: 'completed', version: 1 });
  });
});
