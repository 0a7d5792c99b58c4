import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import type { LogicVersion, ScheduleDef } from '../../contracts/index.ts';
import { cronOf, ticksBetween } from '../../engine/core/schedule-ticks.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import type { Db } from '../../engine/store/db.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { describeEachDriver } from '../support/db.ts';
import { uniqueLogic } from '../support/engine.ts';

const ENV = 'test-env';
const BY = { actor: 'ops@example.com' };
const MINUTE = 60_000;

/** A workflow that parks on a decision, so its instance stays running until it is answered. */
const parking = (schedules: ScheduleDef[]) =>
  uniqueLogic({ start: 'wait', steps: { wait: { kind: 'decision', options: ['done'] } }, schedules });
/** A workflow that ends at once. */
const quick = (schedules: ScheduleDef[]) => uniqueLogic({ start: 'done', steps: { done: { kind: 'pass' } }, schedules });

describeEachDriver('schedules', (getDb) => {
  let now = new Date('2026-01-01T00:00:00Z');
  const engines: Engine[] = [];
  const engine = (db: Db = getDb()) => {
    const e = new Engine({ db, env: ENV, clock: () => now });
    engines.push(e);
    return e;
  };
  beforeEach(async () => {
    await asScheduler(getDb(), (c) => c.query('DELETE FROM schedules'));
  });
  afterAll(async () => {
    for (const e of engines) await e.close();
  });

  /** Moves the manual clock in steps of `stepMs` up to `to`, letting the engine fire and run at each. */
  async function walk(e: Engine, to: string, stepMs: number) {
    const end = new Date(to).getTime();
    while (now.getTime() < end) {
      now = new Date(Math.min(end, now.getTime() + stepMs));
      await e.workers.drain();
    }
  }
  const started = async (e: Engine, id: string) =>
    (await e.schedules.get(ENV, id)).ticks
      .filter((t) => t.outcome === 'started')
      .map((t) => t.tickAt.toISOString())
      .sort();
  const outcomes = async (e: Engine, id: string) =>
    (await e.schedules.get(ENV, id)).ticks.map((t) => `${t.tickAt.toISOString()} ${t.outcome}`).sort();
  async function publish(e: Engine, logic: LogicVersion) {
    await e.publish(logic, ENV);
    return `${logic.logicId}:1`;
  }

  describe('daylight saving time', () => {
    it('a local time that does not exist on the spring-forward day runs once, at the next valid instant', async () => {
      const e = engine();
      now = new Date('2026-03-28T12:00:00Z');
      const id = await publish(e, quick([{ cron: '30 2 * * *', timezone: 'Europe/Berlin' }]));
      await walk(e, '2026-03-30T12:00:00Z', 10 * MINUTE);
      // 2026-03-29 02:30 Berlin does not exist: clocks go from 02:00 CET to 03:00 CEST (01:00Z)
      expect(await started(e, id)).toEqual(['2026-03-29T01:00:00.000Z', '2026-03-30T00:30:00.000Z']);
      const keys = await getDb().pool.query(`SELECT count(*)::int AS n FROM workflows WHERE idempotency_key LIKE $1`, [`schedule:${id}:%`]);
      expect(keys.rows[0].n).toBe(2);
    });

    it('a repeated hour on the fall-back day runs once', async () => {
      const e = engine();
      now = new Date('2026-10-24T12:00:00Z');
      const id = await publish(e, quick([{ cron: '30 2 * * *', timezone: 'Europe/Berlin' }]));
      await walk(e, '2026-10-26T12:00:00Z', 10 * MINUTE);
      // 02:30 happens at 00:30Z (CEST) and again at 01:30Z (CET): it runs at the first only
      expect(await started(e, id)).toEqual(['2026-10-25T00:30:00.000Z', '2026-10-26T01:30:00.000Z']);
    });
  });

  it('a wildcard hour ticks every elapsed hour across fall-back: 25 ticks that Berlin day, 23 on spring-forward day', () => {
    const hourly = cronOf('0 * * * *', 'Europe/Berlin');
    // a Berlin day, midnight to midnight, in UTC: 25 hours in October, 23 in March
    expect(ticksBetween(hourly, new Date('2026-10-24T21:59:59Z'), new Date('2026-10-25T22:59:59Z'), 100)).toHaveLength(25);
    expect(ticksBetween(hourly, new Date('2026-03-28T22:59:59Z'), new Date('2026-03-29T21:59:59Z'), 100)).toHaveLength(23);
  });

  describe('overlap', () => {
    async function hourly(overlap: ScheduleDef['overlap']) {
      const e = engine();
      now = new Date('2026-02-02T00:30:00Z');
      const id = await publish(e, parking([{ cron: '0 * * * *', overlap }]));
      await walk(e, '2026-02-02T03:30:00Z', 15 * MINUTE);
      return { e, id };
    }

    it('skip: a tick while the last instance runs starts nothing and is recorded as skipped', async () => {
      const { e, id } = await hourly('skip');
      expect(await outcomes(e, id)).toEqual([
        '2026-02-02T01:00:00.000Z started',
        '2026-02-02T02:00:00.000Z skipped_overlap',
        '2026-02-02T03:00:00.000Z skipped_overlap',
      ]);
    });

    it('buffer_one: holds the latest tick and starts it once the last instance ends', async () => {
      const { e, id } = await hourly('buffer_one');
      expect(await outcomes(e, id)).toEqual([
        '2026-02-02T01:00:00.000Z started',
        '2026-02-02T02:00:00.000Z skipped_overlap',
        '2026-02-02T03:00:00.000Z buffered',
      ]);
      const first = (await e.schedules.get(ENV, id)).lastInstanceId!;
      await e.resume(first, { step: 'wait', option: 'done', approver: { subject: 'ops', scopes: ['flow:admin'] } }, { env: ENV });
      await e.workers.drain();
      expect(await outcomes(e, id)).toContain('2026-02-02T03:00:00.000Z started');
      expect(await started(e, id)).toHaveLength(2);
    });

    it('allow: every tick starts, whatever still runs', async () => {
      const { e, id } = await hourly('allow');
      expect(await started(e, id)).toEqual(['2026-02-02T01:00:00.000Z', '2026-02-02T02:00:00.000Z', '2026-02-02T03:00:00.000Z']);
    });
  });

  it('after an outage, missed ticks within catchUp run and older ones are recorded as skipped', async () => {
    const e = engine();
    now = new Date('2026-05-01T00:05:00Z');
    const id = await publish(e, quick([{ cron: '*/10 * * * *', catchUp: 'PT25M', overlap: 'allow' }]));
    await e.workers.drain();
    // the engine is down for an hour: nothing fires
    now = new Date('2026-05-01T01:05:00Z');
    await e.workers.drain();
    expect(await outcomes(e, id)).toEqual([
      '2026-05-01T00:10:00.000Z skipped_catch_up',
      '2026-05-01T00:20:00.000Z skipped_catch_up',
      '2026-05-01T00:30:00.000Z skipped_catch_up',
      '2026-05-01T00:40:00.000Z started',
      '2026-05-01T00:50:00.000Z started',
      '2026-05-01T01:00:00.000Z started',
    ]);
    expect((await e.schedules.get(ENV, id)).nextAt?.toISOString()).toBe('2026-05-01T01:10:00.000Z');
  });

  it('with several engine processes on one database, each tick starts exactly one instance', async () => {
    const nodes = [engine(), engine(), engine(), engine()];
    now = new Date('2026-06-01T00:00:30Z');
    const id = await publish(nodes[0]!, quick([{ cron: '* * * * *', overlap: 'allow' }]));
    for (let i = 0; i < 10; i++) {
      now = new Date(now.getTime() + MINUTE);
      await Promise.all(nodes.map((n) => n.schedules.fireDue()));
    }
    const res = await getDb().pool.query<{ key: string; n: number }>(
      `SELECT idempotency_key AS key, count(*)::int AS n FROM workflows WHERE idempotency_key LIKE $1 GROUP BY 1`,
      [`schedule:${id}:%`],
    );
    expect(res.rows).toHaveLength(10);
    expect(res.rows.every((r) => r.n === 1)).toBe(true);
    expect(await started(nodes[0]!, id)).toHaveLength(10);
  });

  it("the workers' timer loop fires a due schedule by the database's clock", async () => {
    const e = new Engine({ db: getDb(), env: ENV, worker: { pollMs: 20 } });
    engines.push(e);
    const logic = quick([]);
    await e.publish(logic, ENV);
    const s = await e.schedules.create(ENV, { id: 'db.clock', logicId: logic.logicId, cron: '0 0 1 1 *' }, BY);
    // as the test clock does for timers: the tick is made due instead of waiting for it
    await asScheduler(getDb(), (c) => c.query(`UPDATE schedules SET next_at = now() - interval '1 second' WHERE id = $1`, [s.id]));
    await e.workers.start();
    try {
      for (let i = 0; i < 500 && (await started(e, s.id)).length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    } finally {
      await e.workers.stop();
    }
    expect(await started(e, s.id)).toHaveLength(1);
    expect((await e.schedules.get(ENV, s.id)).nextAt!.getTime()).toBeGreaterThan(Date.now());
  });

  describe('declared and managed', () => {
    it('a version declares its schedules when it becomes active and they go when it is retired', async () => {
      const e = engine();
      now = new Date('2026-07-01T00:00:00Z');
      const logic = quick([{ name: 'nightly', cron: '0 3 * * *', timezone: 'Europe/Berlin', input: { a: 1 } }]);
      await e.publish(logic, ENV);
      const s = await e.schedules.get(ENV, `${logic.logicId}:nightly`);
      expect(s).toMatchObject({ origin: 'declared', cron: '0 3 * * *', overlap: 'skip', catchUp: 'PT5M', input: { a: 1 } });
      expect(s.nextAt?.toISOString()).toBe('2026-07-01T01:00:00.000Z');
      await e.setVersionActive(ENV, logic.logicId, 1, false);
      await expect(e.schedules.get(ENV, s.id)).rejects.toMatchObject({ code: 'FLOW_NOT_FOUND' });
      await e.setVersionActive(ENV, logic.logicId, 1, true);
      await expect(e.schedules.remove(ENV, s.id, BY)).rejects.toMatchObject({ code: 'FLOW_SCHEDULE_DECLARED', status: 409 });
    });

    it('publishing refuses a pattern or zone croner cannot read', async () => {
      const e = engine();
      await expect(e.publish(quick([{ cron: '61 * * * *' }]), ENV)).rejects.toMatchObject({ code: 'FLOW_SCHEDULE_INVALID' });
      await expect(e.publish(quick([{ cron: '0 * * * *', timezone: 'Mars/Olympus' }]), ENV)).rejects.toMatchObject({ code: 'FLOW_SCHEDULE_INVALID' });
    });

    it('pause stops ticks, resume starts again from the next tick, and both are audited', async () => {
      const e = engine();
      now = new Date('2026-08-01T00:00:00Z');
      const logic = quick([]);
      await e.publish(logic, ENV);
      const s = await e.schedules.create(ENV, { id: 'ops.hourly', logicId: logic.logicId, cron: '0 * * * *' }, BY);
      await e.schedules.setPaused(ENV, s.id, true, { actor: 'ops', reason: 'maintenance' });
      await walk(e, '2026-08-01T03:30:00Z', 30 * MINUTE);
      expect(await started(e, s.id)).toEqual([]);
      await e.schedules.setPaused(ENV, s.id, false, BY);
      expect((await e.schedules.get(ENV, s.id)).nextAt?.toISOString()).toBe('2026-08-01T04:00:00.000Z');
      await walk(e, '2026-08-01T04:10:00Z', 30 * MINUTE);
      expect(await started(e, s.id)).toEqual(['2026-08-01T04:00:00.000Z']);
      const audit = await getDb().pool.query(`SELECT verb, actor, reason FROM audit WHERE schedule_id = $1 ORDER BY id`, [s.id]);
      expect(audit.rows.map((r) => r.verb)).toEqual(['schedule.create', 'schedule.pause', 'schedule.resume']);
    });

    it('trigger starts one now; a backfill dry run lists the ticks, and a backfill twice starts nothing new', async () => {
      const e = engine();
      now = new Date('2026-09-10T12:00:00Z');
      const logic = quick([]);
      await e.publish(logic, ENV);
      const s = await e.schedules.create(ENV, { id: 'ops.daily', logicId: logic.logicId, cron: '0 6 * * *', timezone: 'Europe/Berlin' }, BY);
      const t = await e.schedules.trigger(ENV, s.id, BY);
      expect((await e.get(t.workflowId, ENV)).logicId).toBe(logic.logicId);
      const range = { from: new Date('2026-09-01T00:00:00Z'), to: new Date('2026-09-04T00:00:00Z') };
      const dry = await e.schedules.backfill(ENV, s.id, { ...range, dryRun: true }, BY);
      expect(dry.ticks.map((x) => x.tickAt.toISOString())).toEqual(['2026-09-01T04:00:00.000Z', '2026-09-02T04:00:00.000Z', '2026-09-03T04:00:00.000Z']);
      const count = async () => (await getDb().pool.query(`SELECT count(*)::int AS n FROM workflows WHERE logic_id = $1`, [logic.logicId])).rows[0].n;
      expect(await count()).toBe(1);
      const first = await e.schedules.backfill(ENV, s.id, { ...range, dryRun: false }, BY);
      expect(first.ticks.filter((x) => x.created)).toHaveLength(3);
      const again = await e.schedules.backfill(ENV, s.id, { ...range, dryRun: false }, BY);
      expect(again.ticks.filter((x) => x.created)).toHaveLength(0);
      expect(await count()).toBe(4);
      const dryAfter = await e.schedules.backfill(ENV, s.id, { ...range, dryRun: true }, BY);
      expect(dryAfter.ticks.every((x) => !x.created && x.workflowId !== null)).toBe(true);
    });
  });
});
