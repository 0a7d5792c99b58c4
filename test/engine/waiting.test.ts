import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../engine/runtime/engine.ts';
import { claimWorkflows } from '../../engine/store/claim-workflows.ts';
import { advanceClock, fireDueTimers } from '../../engine/store/timers.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { describeEachDriver } from '../support/db.ts';
import { advance, OPERATOR, settle, testEngine, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

const APPROVER = { subject: 'alice', scopes: ['flow:decide', 'payments:approve'] };
const HOUR = 3_600_000;

describeEachDriver('waiting: decisions, timers, callbacks', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  beforeAll(async () => {
    svc = await new FakeService()
      .on('/capture', () => ({ status: 200, body: { captured: true } }))
      .on('/slow', () => ({ status: 202, body: { status: 'waiting' } }))
      .listen();
    engine = testEngine(getDb(), svc);
  });
  afterAll(() => svc.close());

  async function start(logic: ReturnType<typeof uniqueLogic>, input: unknown = {}) {
    await engine.publish(logic, 'test-env');
    const { id } = await engine.start({ logicId: logic.logicId, input, env: 'test-env' });
    await settle(engine);
    return id;
  }
  const get = (id: string) => engine.get(id, 'test-env');
  const resume = (id: string, args: Parameters<Engine['resume']>[1]) => engine.resume(id, args, { env: 'test-env' });

  const approval = (extra = {}) =>
    uniqueLogic({
      start: 'approve',
      steps: {
        approve: {
          kind: 'decision',
          options: ['approve', 'reject'],
          approverScope: 'payments:approve',
          schema: { type: 'object', properties: { note: { type: 'string' } }, required: ['note'] },
          next: 'route',
          ...extra,
        },
        route: { kind: 'choice', branches: [{ when: "decision.option = 'approve'", next: 'capture' }], otherwise: 'rejected' },
        capture: { kind: 'proxy', handler: 'test', path: '/capture', input: '{ "note": steps.approve.payload.note }' },
        rejected: { kind: 'fail', code: 'REJECTED' },
      },
    });

  it('a decision parks until an approver with the scope resumes it; the decision flows on', async () => {
    const id = await start(approval());
    expect((await get(id)).state).toBe('waiting');
    const record = await resume(id, { step: 'approve', option: 'approve', payload: { note: 'ok' }, approver: APPROVER });
    await settle(engine);
    const done = await get(id);
    expect(done.state).toBe('completed');
    expect(svc.calls('/capture').at(-1)?.headers['x-flow-approved-by']).toBe('alice');
    expect(svc.calls('/capture').at(-1)?.body).toEqual({ note: 'ok' });
    expect(record.steps[0]?.output).toEqual({ option: 'approve', payload: { note: 'ok' }, approvedBy: 'alice' });
    const audit = await engine.ops.audit(id, { env: 'test-env' });
    expect(audit.map((a) => [a.verb, a.actor])).toEqual([['resume', 'alice']]);
  });

  it('refuses a wrong step, an unknown option, a bad payload, a missing scope and a second resume', async () => {
    const id = await start(approval());
    const before = await get(id);
    const ok = { step: 'approve', option: 'approve', payload: { note: 'x' }, approver: APPROVER };
    await expect(resume(id, { ...ok, step: 'capture' })).rejects.toMatchObject({ code: 'FLOW_WRONG_STEP' });
    await expect(resume(id, { ...ok, option: 'maybe' })).rejects.toMatchObject({ code: 'FLOW_BAD_OPTION' });
    await expect(resume(id, { ...ok, payload: { note: 1 } })).rejects.toMatchObject({ code: 'FLOW_DECISION_PAYLOAD_INVALID' });
    await expect(resume(id, { ...ok, approver: { subject: 'bob', scopes: ['flow:decide'] } })).rejects.toMatchObject({
      code: 'FLOW_APPROVER_FORBIDDEN',
    });
    await expect(resume(id, { ...ok, approver: { subject: 'carol', scopes: ['payments:approve'] } })).rejects.toMatchObject({
      code: 'FLOW_SCOPE_MISSING',
    });
    expect(await get(id)).toEqual(before);
    await resume(id, { ...ok, option: 'reject' });
    await expect(resume(id, ok)).rejects.toMatchObject({ code: 'FLOW_NOT_AWAITING_DECISION' });
    await settle(engine);
    expect((await get(id)).error?.code).toBe('REJECTED');
  });

  it('a decision has no deadline by default and fails with DEADLINE_EXCEEDED once one passes', async () => {
    const open = await start(approval());
    const timed = await start(approval({ deadline: 'PT1H' }));
    await advance(engine, HOUR - 60_000);
    expect((await get(timed)).state).toBe('waiting');
    await advance(engine, 120_000);
    expect((await get(timed)).state).toBe('failed');
    expect((await get(timed)).error?.code).toBe('DEADLINE_EXCEEDED');
    await advance(engine, 1000 * HOUR);
    expect((await get(open)).state).toBe('waiting');
  });

  it('an expired deadline follows onTimeout when the decision names one', async () => {
    const logic = uniqueLogic({
      start: 'approve',
      steps: {
        approve: { kind: 'decision', options: ['ok'], deadline: 'PT5M', onTimeout: 'escalate' },
        escalate: { kind: 'pass', input: '{ "escalated": steps.approve.error.code }' },
      },
    });
    const id = await start(logic);
    await advance(engine, 5 * 60_000);
    const record = await get(id);
    expect(record.state).toBe('completed');
    expect(record.output).toEqual({ escalated: 'DEADLINE_EXCEEDED' });
  });

  it('a delay waits for its timer on the database clock, then runs on', async () => {
    const logic = uniqueLogic({
      start: 'wait',
      steps: { wait: { kind: 'delay', duration: 'PT10M', next: 'after' }, after: { kind: 'pass', input: '"done"' } },
    });
    const id = await start(logic);
    await advance(engine, 5 * 60_000);
    expect((await get(id)).state).toBe('waiting');
    await advance(engine, 5 * 60_000);
    expect((await get(id)).output).toBe('done');
  });

  it('a delay until an expression timestamp in the past fires at once', async () => {
    const logic = uniqueLogic({ start: 'wait', steps: { wait: { kind: 'delay', until: 'input.at' } } });
    const id = await start(logic, { at: '2020-01-01T00:00:00Z' });
    await settle(engine);
    expect((await get(id)).state).toBe('completed');
  });

  it('a 202 waiting answer parks; the service completes it once with the resume token', async () => {
    const logic = uniqueLogic({
      start: 'slow',
      steps: { slow: { kind: 'proxy', handler: 'test', path: '/slow', next: 'after' }, after: { kind: 'pass', input: 'steps.slow' } },
    });
    const id = await start(logic);
    expect((await get(id)).state).toBe('waiting');
    const token = svc.calls('/slow').at(-1)?.headers['x-flow-resume-token'] as string;
    expect(token.startsWith(id)).toBe(true);
    await expect(engine.complete(`${token.slice(0, -2)}xx`, { output: {} })).rejects.toMatchObject({ code: 'FLOW_BAD_TOKEN' });
    const results = await Promise.allSettled([
      engine.complete(token, { output: { shipped: 1 } }),
      engine.complete(token, { output: { shipped: 2 } }),
    ]);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    expect(results.find((r) => r.status === 'rejected')).toMatchObject({ reason: { code: 'FLOW_CALLBACK_ANSWERED_DIFFERENTLY' } });
    await settle(engine);
    const record = await get(id);
    expect(record.state).toBe('completed');
    expect([{ shipped: 1 }, { shipped: 2 }]).toContainEqual(record.output);
    expect(record.steps.filter((s) => s.step === 'slow').map((s) => s.state)).toEqual(['succeeded']);
  });

  it('a completion that arrives before the 202 answer is committed waits for it, and completes the step', async () => {
    // the service completes the step through its resume token before it even answers 202: the
    // completion finds the attempt still running (its park not yet committed), and must neither
    // be refused as stale nor lost
    const early: Promise<unknown>[] = [];
    svc.on('/early', async (req) => {
      early.push(engine.complete(req.headers['x-flow-resume-token']!, { output: { early: true } }));
      await new Promise((r) => setTimeout(r, 100));
      return { status: 202, body: { status: 'waiting' } };
    });
    const logic = uniqueLogic({
      start: 'slow',
      steps: { slow: { kind: 'proxy', handler: 'test', path: '/early', next: 'after' }, after: { kind: 'pass', input: 'steps.slow' } },
    });
    await engine.publish(logic, 'test-env');
    const { id } = await engine.start({ logicId: logic.logicId, input: {}, env: 'test-env' });
    await settle(engine);
    await expect(early[0]).resolves.toMatchObject({ id });
    await settle(engine);
    const record = await get(id);
    expect(record.state).toBe('completed');
    expect(record.output).toEqual({ early: true });
    expect(svc.calls('/early')).toHaveLength(1);
  });

  it('a completion for an attempt whose 202 answer never comes is refused as not yet waiting, and changes nothing', async () => {
    let release: () => void = () => {};
    const answered = new Promise<void>((r) => {
      release = r;
    });
    const early: Promise<unknown>[] = [];
    svc.on('/late', async (req) => {
      early.push(engine.complete(req.headers['x-flow-resume-token']!, { output: { early: true } }));
      await answered;
      return { status: 202, body: { status: 'waiting' } };
    });
    const logic = uniqueLogic({ start: 'slow', steps: { slow: { kind: 'proxy', handler: 'test', path: '/late' } } });
    await engine.publish(logic, 'test-env');
    const { id } = await engine.start({ logicId: logic.logicId, input: {}, env: 'test-env' });
    const settled = settle(engine);
    await expect.poll(() => early.length).toBe(1);
    await expect(early[0]).rejects.toMatchObject({ code: 'FLOW_NOT_YET_WAITING', status: 409 });
    release();
    await settled;
    const record = await get(id);
    expect(record.state).toBe('waiting');
    expect(record.steps.map((s) => s.state)).toEqual(['parked']);
  });

  it('cancelling a waiting instance removes its timers', async () => {
    const id = await start(approval({ deadline: 'P1D' }));
    const timers = async () =>
      (await getDb().pool.query('SELECT count(*)::int AS n FROM timers WHERE workflow_id = $1', [id])).rows[0].n;
    expect(await timers()).toBe(1);
    await engine.ops.cancel(id, { reason: 'no longer needed' }, { ...OPERATOR, env: 'test-env' });
    expect(await timers()).toBe(0);
    expect((await get(id)).state).toBe('cancelled');
  });

  describe('firing a timer, then applying it', () => {
    const row = async (id: string) =>
      (
        await getDb().pool.query<{ state: string; wakes: unknown; timers: number }>(
          'SELECT state, wakes, (SELECT count(*)::int FROM timers WHERE workflow_id = w.id) AS timers FROM workflows w WHERE id = $1',
          [id],
        )
      ).rows[0]!;
    const fire = () => fireDueTimers(getDb().pool, 100);
    const delayThenPass = () =>
      uniqueLogic({ start: 'wait', steps: { wait: { kind: 'delay', duration: 'PT10M', next: 'after' }, after: { kind: 'pass', input: '"done"' } } });

    it('a stale timer fires into nothing: a deadline of a decision already answered wakes nobody', async () => {
      const logic = uniqueLogic({
        start: 'approve',
        steps: {
          approve: { kind: 'decision', options: ['approve'], deadline: 'PT10M', next: 'pause' },
          pause: { kind: 'delay', duration: 'PT1H', next: 'done' },
          done: { kind: 'pass', input: '"done"' },
        },
      });
      const id = await start(logic);
      await resume(id, { step: 'approve', option: 'approve', approver: APPROVER });
      await settle(engine);
      expect(await row(id)).toEqual({ state: 'waiting', wakes: null, timers: 2 });
      await asScheduler(getDb(), (c) => advanceClock(c, 11 * 60_000));
      await fire();
      // the deadline went without a trace; the delay still waits
      expect(await row(id)).toEqual({ state: 'waiting', wakes: null, timers: 1 });
      await advance(engine, HOUR);
      expect((await get(id)).output).toBe('done');
    });

    it('a timer of an instance a worker holds waits for it to let go, then fires; the poll says it passed one over', async () => {
      const id = await start(delayThenPass());
      await getDb().pool.query(`UPDATE workflows SET lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 hour' WHERE id = $1`, [id]);
      await asScheduler(getDb(), (c) => advanceClock(c, 11 * 60_000));
      // the pool looks again when a held woken instance lets go only if a poll passed one over (0015)
      expect(await fire()).toMatchObject({ fired: 0, passedOver: 1 });
      expect(await row(id)).toEqual({ state: 'waiting', wakes: null, timers: 1 });
      await getDb().pool.query('UPDATE workflows SET lease_token = NULL, lease_expires_at = NULL WHERE id = $1', [id]);
      expect(await fire()).toMatchObject({ fired: 1, passedOver: 0 });
      expect(await row(id)).toMatchObject({ state: 'waiting', wakes: { 'delay:0': { purpose: 'delay', seq: 0 } }, timers: 0 });
      await settle(engine);
      expect((await get(id)).output).toBe('done');
    });

    it('a wake whose claimer died is applied by the next claimer, once', async () => {
      const id = await start(delayThenPass());
      await asScheduler(getDb(), (c) => advanceClock(c, 11 * 60_000));
      await fire();
      // a worker claims the woken instance and dies before applying the wake-up
      const claimed = await claimWorkflows(getDb().pool, { limit: 100, leaseMs: 60_000 });
      expect(claimed.find((s) => s.instance.id === id)?.wakes).toEqual([{ purpose: 'delay', seq: 0 }]);
      await getDb().pool.query(`UPDATE workflows SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, [id]);
      await settle(engine);
      const record = await get(id);
      expect(record.output).toBe('done');
      expect(record.steps.map((s) => [s.step, s.state])).toEqual([
        ['wait', 'succeeded'],
        ['after', 'succeeded'],
      ]);
    });

    it('a verb beats a wake nobody has applied yet: cancel leaves nothing to run', async () => {
      const id = await start(delayThenPass());
      await asScheduler(getDb(), (c) => advanceClock(c, 11 * 60_000));
      await fire();
      expect((await row(id)).wakes).not.toBeNull();
      await engine.ops.cancel(id, { reason: 'changed our mind' }, { ...OPERATOR, env: 'test-env' });
      expect(await row(id)).toEqual({ state: 'cancelled', wakes: null, timers: 0 });
      await settle(engine);
      expect((await get(id)).steps.map((s) => s.step)).toEqual(['wait']);
    });
  });
});
