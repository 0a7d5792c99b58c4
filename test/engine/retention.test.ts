import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import type { Engine } from '../../engine/runtime/engine.ts';
import { readArchive } from '../../engine/runtime/archive.ts';
import { Retention, type RetentionOptions } from '../../engine/runtime/retention.ts';
import type { Db } from '../../engine/store/db.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { exportTrace, replay } from '../../engine/testing/index.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle, testEngine, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

const ENV = 'test-env';
const DAY = 86_400_000;
/** Tables keyed by an instance, and how to count its rows in each. */
const KEYED = ['workflows WHERE id = $1', 'journal WHERE workflow_id = $1', 'step_runs WHERE workflow_id = $1', 'workflow_outputs WHERE workflow_id = $1',
  'outbox WHERE workflow_id = $1', 'audit WHERE workflow_id = $1', 'timers WHERE workflow_id = $1', 'legal_holds WHERE workflow_id = $1',
  'workflow_messages WHERE workflow_id = $1'];

/** Rows per table for one instance, read as the scheduler (every env). */
async function rowsOf(db: Db, id: string): Promise<Record<string, number>> {
  return asScheduler(db, async (c) => {
    const out: Record<string, number> = {};
    for (const t of KEYED) out[t.split(' ')[0]!] = Number((await c.query<{ n: string }>(`SELECT count(*) AS n FROM ${t}`, [id])).rows[0]!.n);
    return out;
  });
}

/**
 * Moves instances `days` into the past: created and last changed then, their history rows in that
 * week's partition (made first, as the engine makes them ahead), as if they had run then.
 */
async function backdate(db: Db, ids: string[], days: number): Promise<void> {
  const then = new Date(Date.now() - days * DAY);
  await db.pool.query('SELECT ensure_history_partitions($1, $1)', [then]);
  await asScheduler(db, async (c) => {
    const shift = [ids, `${days} days`];
    await c.query(`UPDATE workflows SET created_at = created_at - $2::interval, updated_at = updated_at - $2::interval WHERE id = ANY($1::uuid[])`, shift);
    for (const t of ['journal', 'step_runs']) {
      await c.query(
        `WITH moved AS (DELETE FROM ${t} WHERE workflow_id = ANY($1::uuid[]) RETURNING *)
         INSERT INTO ${t} SELECT (jsonb_populate_record(NULL::${t}, to_jsonb(moved) || jsonb_build_object('born', moved.born - $2::interval))).* FROM moved`,
        shift,
      );
    }
  });
}

function weekOf(daysAgo: number): string {
  const d = new Date(Date.now() - daysAgo * DAY);
  const monday = new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() - ((d.getUTCDay() + 6) % 7)));
  return monday.toISOString().slice(0, 10).replaceAll('-', '');
}

describeEachDriver('retention, legal hold, erasure and archive', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  beforeAll(async () => {
    svc = await new FakeService().on('/charge', (r) => ({ status: 200, body: { charged: (r.body as { amount: number }).amount } })).listen();
    engine = testEngine(getDb(), svc);
  });
  afterAll(async () => {
    await engine.close();
    await svc.close();
  });

  const charge = (extra: Partial<LogicVersion> = {}) =>
    uniqueLogic({ ...extra, start: 'charge', steps: { charge: { kind: 'proxy', handler: 'test', path: '/charge', input: '{ "amount": input.amount }' } } });
  const asks = () => uniqueLogic({ start: 'ask', steps: { ask: { kind: 'decision', options: ['ok'] } } });

  async function run(logic: LogicVersion, amount = 5): Promise<string> {
    await engine.publish(logic, ENV);
    const { id } = await engine.start({ logicId: logic.logicId, input: { amount }, env: ENV });
    await settle(engine);
    return id;
  }

  /** A delivered outbox row, an audit row and a message, so every table keyed by the instance has one. */
  async function decorate(id: string): Promise<void> {
    await asScheduler(getDb(), async (c) => {
      await c.query(
        `INSERT INTO outbox (env_id, workflow_id, kind, topic, payload, idempotency_key, delivered_at) VALUES ($1, $2, 'event', 't', '{}', $3, now())`,
        [ENV, id, `${id}:t`],
      );
      await c.query(`INSERT INTO audit (env_id, workflow_id, verb, actor, before, after) VALUES ($1, $2, 'retry', 'ops', '{}', '{}')`, [ENV, id]);
      await c.query(
        `INSERT INTO workflow_messages (env_id, workflow_id, idempotency_key, name, payload, state, answer_status, answer)
         VALUES ($1, $2, 'k', 'note', '{"secret": "pii"}', 'buffered', 202, '{}')`,
        [ENV, id],
      );
    });
  }

  const retention = (o: Partial<RetentionOptions> = {}) => new Retention(getDb(), { days: 30, envDays: {}, ...o });
  const ops = (scopes: string[]) => ({ actor: { subject: 'dpo@example.com', scopes }, env: ENV, reason: 'customer request' });

  it('removes an ended instance past its retention with every row keyed by it; a live one and a held one in its week stay', async () => {
    const ended = await run(charge());
    const held = await run(charge());
    const live = await run(asks());
    for (const id of [ended, held, live]) await decorate(id);
    await engine.history.hold(held, ops(['flow:admin']));
    await backdate(getDb(), [ended, held, live], 60);
    const before = await rowsOf(getDb(), ended);
    expect(before).toMatchObject({ workflows: 1, journal: expect.any(Number), step_runs: 1, workflow_outputs: 1, outbox: 1, audit: 1, workflow_messages: 1 });
    const keptBefore = [await rowsOf(getDb(), held), await rowsOf(getDb(), live)];

    const report = await retention().run();

    expect(report).toMatchObject({ dryRun: false, instancesRemoved: 1, partitionsDropped: [] });
    expect(await rowsOf(getDb(), ended)).toEqual({
      workflows: 0,
      journal: 0,
      step_runs: 0,
      workflow_outputs: 0,
      outbox: 0,
      audit: 0,
      timers: 0,
      legal_holds: 0,
      workflow_messages: 0,
    });
    expect([await rowsOf(getDb(), held), await rowsOf(getDb(), live)]).toEqual(keptBefore);
  });

  it("keeps an instance younger than its definition's retention.days or its env's days, whatever the default", async () => {
    const long = await run(charge({ retention: { days: 400 } }));
    const plain = await run(charge());
    await backdate(getDb(), [long, plain], 100);
    const report = await retention({ days: 30, envDays: { [ENV]: 200 } }).run({ dryRun: true });
    expect(report?.instancesRemoved).toBe(0);
    expect((await retention({ days: 30, envDays: { [ENV]: 90 } }).run({ dryRun: true }))?.instancesRemoved).toBe(1);
    await retention({ days: 30, envDays: { [ENV]: 90 } }).run();
    expect((await rowsOf(getDb(), long)).workflows).toBe(1);
    expect((await rowsOf(getDb(), plain)).workflows).toBe(0);
  });

  it('drops a week whose instances are all removable as whole partitions, and the disk they held is freed; a dry run changes nothing', async () => {
    const ids = [await run(charge()), await run(charge())];
    await backdate(getDb(), ids, 200);
    const week = weekOf(200);
    const dry = await retention().run({ dryRun: true });
    expect(dry?.partitionsDropped).toContain(`journal_p${week}`);
    expect(dry?.bytesFreed).toBeGreaterThan(0);
    expect((await rowsOf(getDb(), ids[0]!)).workflows).toBe(1);

    const report = await retention().run();

    expect(report?.partitionsDropped).toEqual(expect.arrayContaining([`journal_p${week}`, `step_runs_p${week}`]));
    expect(report?.bytesFreed).toBeGreaterThan(0);
    expect(report!.bytesAfter).toBeLessThan(report!.bytesBefore);
    const left = await getDb().pool.query('SELECT to_regclass($1) AS j, to_regclass($2) AS s', [`journal_p${week}`, `step_runs_p${week}`]);
    expect(left.rows[0]).toEqual({ j: null, s: null });
    for (const id of ids) expect((await rowsOf(getDb(), id)).workflows).toBe(0);
  });

  it('a hold and its release are audited, need flow:admin, and a held instance is kept', async () => {
    const id = await run(charge());
    await expect(engine.history.hold(id, ops(['flow:cancel']))).rejects.toMatchObject({ code: 'FLOW_SCOPE_MISSING' });
    await engine.history.hold(id, ops(['flow:admin']));
    await backdate(getDb(), [id], 45);
    await retention().run();
    expect((await rowsOf(getDb(), id)).workflows).toBe(1);
    await engine.history.releaseHold(id, { ...ops(['flow:admin']), reason: 'case closed' });
    const audit = (await engine.ops.audit(id, { env: ENV })).map(({ verb, actor, reason, before, after }) => ({ verb, actor, reason, before, after }));
    expect(audit).toEqual([
      { verb: 'legal_hold', actor: 'dpo@example.com', reason: 'customer request', before: { held: false }, after: { held: true } },
      { verb: 'legal_hold_release', actor: 'dpo@example.com', reason: 'case closed', before: { held: true }, after: { held: false } },
    ]);
    await retention().run();
    expect((await rowsOf(getDb(), id)).workflows).toBe(0);
  });

  it('erasure tombstones input, outputs, attempts and journal payloads, keeps states, steps and times, and every replay of it refuses', async () => {
    const id = await run(charge(), 1234);
    const live = await run(asks());
    await expect(engine.history.erase(live, ops(['flow:erase']))).rejects.toMatchObject({ code: 'FLOW_ERASE_NOT_ENDED' });
    await expect(engine.history.erase(id, ops(['flow:cancel']))).rejects.toMatchObject({ code: 'FLOW_SCOPE_MISSING' });
    const before = await engine.get(id, ENV);

    const after = await engine.history.erase(id, ops(['flow:erase']));

    const tomb = { $erased: true, at: expect.any(String) };
    expect(after).toMatchObject({ state: before.state, input: tomb, output: tomb, createdAt: before.createdAt, updatedAt: before.updatedAt });
    expect(after.steps.map((s) => [s.step, s.state, s.startedAt, s.input, s.output])).toEqual(
      before.steps.map((s) => [s.step, s.state, s.startedAt, tomb, tomb]),
    );
    const stored = JSON.stringify(
      (await asScheduler(getDb(), (c) => c.query('SELECT j.event, j.decision, j.initial, o.output FROM journal j, workflow_outputs o WHERE j.workflow_id = $1 AND o.workflow_id = $1', [id]))).rows,
    );
    expect(stored).not.toContain('1234');
    expect((await engine.ops.audit(id, { env: ENV })).map((a) => a.verb)).toEqual(['erase']);
    await expect(engine.ops.replayFrom(id, { step: 'charge' }, ops(['flow:admin']))).rejects.toMatchObject({ code: 'FLOW_INSTANCE_ERASED' });
    await expect(engine.ops.retry(id, ops(['flow:admin']))).rejects.toMatchObject({ code: 'FLOW_INSTANCE_ERASED' });
    const trace = await exportTrace(engine, ENV, id);
    await expect(replay(await engine.logics.get(ENV, before.logicHash), trace)).rejects.toMatchObject({ code: 'FLOW_INSTANCE_ERASED' });
  });

  it('erasure removes the search attributes, which were read off the erased data', async () => {
    const id = await run(charge({ attributes: { amount: { value: 'input.amount' } } }), 4321);
    expect((await engine.get(id, ENV)).attributes).toEqual({ amount: 4321 });
    const after = await engine.history.erase(id, ops(['flow:erase']));
    expect(after.attributes ?? {}).toEqual({});
    const rows = await asScheduler(getDb(), (c) => c.query('SELECT * FROM workflow_attributes WHERE workflow_id = $1', [id]));
    expect(rows.rows).toEqual([]);
  });

  it("erasure tombstones the payloads of the instance's messages; their names stay", async () => {
    const id = await run(charge());
    await decorate(id);
    await engine.history.erase(id, ops(['flow:erase']));
    const rows = await asScheduler(getDb(), (c) => c.query('SELECT name, payload FROM workflow_messages WHERE workflow_id = $1', [id]));
    expect(rows.rows).toEqual([{ name: 'note', payload: { $erased: true, at: expect.any(String) } }]);
  });

  it('an instance on legal hold cannot be erased', async () => {
    const id = await run(charge());
    await engine.history.hold(id, ops(['flow:admin']));
    await expect(engine.history.erase(id, ops(['flow:erase']))).rejects.toMatchObject({ code: 'FLOW_INSTANCE_HELD' });
  });

  it('archives removed instances as traces, one file per week; restored, they replay to the same decisions', async () => {
    const dir = await mkdtemp(join(tmpdir(), 's8flow-archive-'));
    try {
      const logic = charge();
      const ids = [await run(logic, 7), await run(logic, 8)];
      const recorded = await Promise.all(ids.map((id) => exportTrace(engine, ENV, id)));
      await backdate(getDb(), ids, 300);

      const report = await retention({ archiveDir: dir }).run();

      const file = join(dir, `history-${weekOf(300)}.ndjson`);
      expect(report?.archiveFiles).toContain(file);
      for (const id of ids) expect((await rowsOf(getDb(), id)).workflows).toBe(0);
      expect((await readFile(file, 'utf8')).trim().split('\n')).toHaveLength(2);
      const restored = [];
      for await (const t of readArchive(file)) restored.push(t);
      expect(restored.map((t) => t.initial.id).sort()).toEqual([...ids].sort());
      for (const t of restored) {
        const final = await replay(logic, t);
        const original = recorded.find((r) => r.initial.id === t.initial.id)!;
        expect(t.entries.map((e) => e.decision)).toEqual(original.entries.map((e) => e.decision));
        expect(final.state).toBe(original.final?.state);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
