import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { StepDef } from '../../contracts/index.ts';
import { BulkJobs } from '../../engine/runtime/bulk-jobs.ts';
import type { Engine } from '../../engine/runtime/engine.ts';
import { migrationPlan } from '../../engine/core/migrate.ts';
import { exportTrace } from '../../engine/runtime/export-trace.ts';
import { loadWorkflow } from '../../engine/store/load-workflow.ts';
import { asScheduler, inEnv } from '../../engine/store/tx.ts';
import { replay } from '../../engine/testing/trace.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle, testEngine } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

const ENV = 'test-env';
const OPS = { subject: 'ops@example.com', scopes: ['flow:admin'] };
const DECIDER = { subject: 'approver@example.com', scopes: ['flow:decide'] };

let counter = 0;

/**
 * The payments story of docs/versions.md, one logicId per test: v1 reserves (with a compensation), waits
 * for approval, charges; v2 adds a fraud check between approval and charge.
 */
function versions(logicId: string) {
  const reserve: StepDef = { kind: 'proxy', handler: 'test', path: '/reserve', compensate: { kind: 'proxy', handler: 'test', path: '/release' }, next: 'approval' };
  const charge: StepDef = { kind: 'proxy', handler: 'test', path: '/charge' };
  const v = (version: number, steps: Record<string, StepDef>) => makeLogic({ logicId, version, start: 'reserve', steps });
  return {
    v1: v(1, { reserve, approval: { kind: 'decision', options: ['approve'], next: 'charge' }, charge }),
    v2: v(2, {
      reserve,
      approval: { kind: 'decision', options: ['approve'], next: 'fraud' },
      fraud: { kind: 'proxy', handler: 'test', path: '/fraud', next: 'charge' },
      charge,
    }),
    /** The compensation of reserve changed. */
    v3: v(3, { reserve: { ...reserve, compensate: { kind: 'proxy', handler: 'test', path: '/release-v3' } }, approval: { kind: 'decision', options: ['approve'], next: 'charge' }, charge }),
    /** approval renamed review. */
    v4: v(4, { reserve: { ...reserve, next: 'review' }, review: { kind: 'decision', options: ['approve'], next: 'charge' }, charge }),
  };
}

describeEachDriver('migrate', (getDb) => {
  let svc: FakeService;
  let engine: Engine;

  beforeAll(async () => {
    svc = await new FakeService()
      .on('/reserve', () => ({ status: 200, body: { held: true } }))
      .on('/fraud', () => ({ status: 200, body: { score: 1 } }))
      .on('/charge', () => ({ status: 200, body: { charged: true } }))
      .on('/release', () => ({ status: 200, body: {} }))
      .listen();
    engine = testEngine(getDb(), svc);
  });
  afterAll(() => svc.close());

  async function story(n = 2): Promise<{ vs: ReturnType<typeof versions>; ids: string[] }> {
    const vs = versions(`t.migrate${++counter}`);
    for (const doc of [vs.v1, vs.v2, vs.v3, vs.v4]) await engine.publish(doc, ENV);
    const ids: string[] = [];
    for (let i = 0; i < n; i++) ids.push((await engine.start({ logicId: vs.v1.logicId, version: 1, input: { i }, env: ENV })).id);
    await settle(engine);
    for (const id of ids) expect(await engine.get(id, ENV)).toMatchObject({ state: 'waiting', currentStep: 'approval', version: 1 });
    return { vs, ids };
  }

  async function job(req: Parameters<BulkJobs['startMigration']>[1]) {
    const bulk = new BulkJobs(getDb(), engine.ops);
    const created = await bulk.startMigration(ENV, req, OPS);
    await bulk.settled();
    return bulk.get(ENV, created.id);
  }

  it('the dry run says where each instance lands and what runs next under which keys, and changes nothing', async () => {
    const { vs, ids } = await story(2);
    const plan = await engine.ops.migrations.preview({ logicId: vs.v1.logicId, fromVersion: 1, toVersion: 2, reason: 'fraud check' }, OPS, { env: ENV });
    expect(plan).toMatchObject({ selected: 2, moves: 2, refused: 0, from: { version: 1 }, to: { version: 2 } });
    for (const item of plan.items) {
      const id = item.workflowId;
      expect(item).toMatchObject({ refusal: null, lands: { version: 2, step: 'approval' }, keeps: { step: 'approval', attempt: 1 } });
      expect(item.next?.steps.filter((s) => s.callsOut).map((s) => [s.step, s.idempotencyKey])).toEqual([
        ['fraud', `${id}:fraud:0`],
        ['charge', `${id}:charge:0`],
      ]);
      expect(item.next?.assumes).toBe('decision approval = approve');
    }
    for (const id of ids) expect((await engine.get(id, ENV)).version).toBe(1);
    expect(await engine.ops.audit(ids[0]!, { env: ENV })).toEqual([]);
  });

  it('the dry run groups the selection by shape, plans one instance per group, and pages the instances, each plan its own as if planned alone', async () => {
    const { vs, ids } = await story(5);
    // two shapes: three parked at approval, two ended (refused)
    for (const id of ids.slice(3)) await engine.resume(id, { step: 'approval', option: 'approve', approver: DECIDER }, { env: ENV });
    await settle(engine);
    const order = [ids[4]!, ids[0]!, ids[3]!, ids[2]!, ids[1]!];
    const req = { logicId: vs.v1.logicId, fromVersion: 1, toVersion: 2, ids: order, reason: 'fraud check', dryRun: true };
    const first = await engine.ops.migrations.preview({ ...req, pageSize: 2 }, OPS, { env: ENV });
    expect(first).toMatchObject({ selected: 5, moves: 3, refused: 2 });
    expect(first.groups.map((g) => [g.state, g.currentStep, g.count, g.lands?.step ?? null, g.refusal?.code ?? null])).toEqual([
      ['waiting', 'approval', 3, 'approval', null],
      ['completed', 'charge', 2, null, 'FLOW_MIGRATE_STATE'],
    ]);
    const items = [...first.items];
    let after = first.nextAfter;
    while (after !== null) {
      const page = await engine.ops.migrations.preview({ ...req, pageSize: 2, after }, OPS, { env: ENV });
      expect(page.groups).toEqual(first.groups);
      items.push(...page.items);
      after = page.nextAfter;
    }
    // in the order of the ids, every instance once, and each plan what planning it alone says
    expect(items.map((i) => i.workflowId)).toEqual(order);
    const [v1, v2] = [vs.v1, vs.v2];
    for (const item of items) {
      const stored = await inEnv(engine.db, ENV, (c) => loadWorkflow(c, item.workflowId));
      const alone = await migrationPlan(v1, v2, stored!.instance, {});
      const next = alone.next === null ? null : (({ keptEffects: _k, ...rest }) => rest)(alone.next);
      expect(item).toEqual({ ...alone, next });
    }
    await expect(engine.ops.migrations.preview({ ...req, after: randomUUID() }, OPS, { env: ENV })).rejects.toMatchObject({ code: 'FLOW_MIGRATE_BAD_SELECTION' });
    await expect(job({ ...req, dryRun: false, pageSize: 2 })).rejects.toMatchObject({ code: 'FLOW_MIGRATE_BAD_SELECTION' });
  });

  it('a migration job moves each instance, journalled and audited, and the moved instance runs v2 to the end under the keys the dry run named', async () => {
    const { vs, ids } = await story(2);
    const done = await job({ logicId: vs.v1.logicId, fromVersion: 1, toVersion: 2, reason: 'fraud check', filter: { step: 'approval' } });
    expect(done).toMatchObject({ verb: 'migrate', state: 'done', total: 2, done: 2, failed: 0 });
    expect(done.items.map((i) => [i.status, i.state])).toEqual([
      ['ok', 'waiting'],
      ['ok', 'waiting'],
    ]);
    const id = ids[0]!;
    expect(await engine.get(id, ENV)).toMatchObject({ version: 2, logicHash: vs.v2.hash, state: 'waiting', currentStep: 'approval' });
    const audit = await engine.ops.audit(id, { env: ENV });
    expect(audit.map((a) => [a.verb, a.actor, a.reason])).toEqual([['migrate', 'ops@example.com', 'fraud check']]);
    expect(audit[0]).toMatchObject({ args: { fromVersion: 1, toVersion: 2, renames: {} }, before: { version: 1 }, after: { version: 2 } });

    await engine.resume(id, { step: 'approval', option: 'approve', approver: DECIDER }, { env: ENV });
    await settle(engine);
    expect((await engine.get(id, ENV)).state).toBe('completed');
    expect(svc.calls('/fraud').map((r) => r.headers['idempotency-key'])).toContain(`${id}:fraud:0`);
    expect(svc.calls('/charge').filter((r) => r.headers['idempotency-key'] === `${id}:charge:0`)).toHaveLength(1);

    // the trace replays to the end across the migration, each part on its own version
    const trace = await exportTrace(engine, ENV, id);
    expect(trace.entries.map((e) => e.event.type)).toContain('migrate');
    expect((await replay(vs.v2, trace, { versions: [vs.v1] })).state).toBe('completed');
    await expect(replay(vs.v2, trace)).rejects.toMatchObject({ code: 'FLOW_REPLAY_VERSION_MISSING' });
  });

  it('a rename map moves a parked instance to the step under its new name', async () => {
    const { vs, ids } = await story(1);
    const id = ids[0]!;
    const req = { logicId: vs.v1.logicId, fromVersion: 1, toVersion: 4, ids: [id], renames: { approval: 'review' }, reason: 'renamed' };
    const plan = await engine.ops.migrations.preview(req, OPS, { env: ENV });
    expect(plan.items[0]).toMatchObject({ refusal: null, lands: { version: 4, step: 'review' }, keeps: { step: 'review', idempotencyKey: `${id}:approval:0` } });
    // without the map, the step it is parked at is not in v4
    const unmapped = await engine.ops.migrations.preview({ ...req, renames: {} }, OPS, { env: ENV });
    expect(unmapped.items[0]?.refusal).toMatchObject({ code: 'FLOW_MIGRATE_UNSAFE', retryable: false, reasons: [{ code: 'FLOW_COMPAT_STEP_MISSING', step: 'approval' }] });

    expect(await job(req)).toMatchObject({ done: 1, failed: 0 });
    expect(await engine.get(id, ENV)).toMatchObject({ version: 4, currentStep: 'review' });
    await engine.resume(id, { step: 'review', option: 'approve', approver: DECIDER }, { env: ENV });
    await settle(engine);
    expect((await engine.get(id, ENV)).state).toBe('completed');
    const trace = await exportTrace(engine, ENV, id);
    expect((await replay(vs.v4, trace, { versions: [vs.v1] })).state).toBe('completed');
    // a tampered move (its rename map dropped) is caught where it is applied
    const at = trace.entries.findIndex((e) => e.event.type === 'migrate');
    const tampered = structuredClone(trace);
    tampered.entries[at]!.event = { ...(tampered.entries[at]!.event as object), renames: {} } as never;
    await expect(replay(vs.v4, tampered, { versions: [vs.v1] })).rejects.toMatchObject({ code: 'FLOW_REPLAY_DIVERGED', details: { index: at, event: 'migrate' } });
  });

  it('refuses, each with its code: a changed compensation, a renamed compensated step, an instance processing (retryable), one that ended, one moved already', async () => {
    const { vs, ids } = await story(3);
    const [a, b, c] = ids as [string, string, string];
    const base = { logicId: vs.v1.logicId, fromVersion: 1, reason: 'x' };

    const changed = await engine.ops.migrations.preview({ ...base, toVersion: 3, ids: [a] }, OPS, { env: ENV });
    expect(changed.items[0]?.refusal).toMatchObject({ code: 'FLOW_MIGRATE_COMPENSATION', reasons: [{ code: 'FLOW_COMPAT_COMPENSATION_CHANGED', step: 'reserve' }] });

    const v5 = makeLogic({ ...vs.v1, version: 5, start: 'hold', steps: { hold: { ...vs.v1.steps['reserve']!, next: 'approval' } as StepDef, approval: vs.v1.steps['approval']!, charge: vs.v1.steps['charge']! } });
    await engine.publish(v5, ENV);
    const renamedComp = await engine.ops.migrations.preview({ ...base, toVersion: 5, ids: [a], renames: { reserve: 'hold' } }, OPS, { env: ENV });
    expect(renamedComp.items[0]?.refusal).toMatchObject({ code: 'FLOW_MIGRATE_COMPENSATION' });

    await asScheduler(engine.db, (q) => q.query(`UPDATE workflows SET state = 'processing', lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute' WHERE id = $1`, [b]));
    await engine.resume(c, { step: 'approval', option: 'approve', approver: DECIDER }, { env: ENV });
    await settle(engine);
    expect((await engine.get(c, ENV)).state).toBe('completed');

    const moved = await job({ ...base, toVersion: 2, ids: [a] });
    expect(moved.failed).toBe(0);
    const refused = await job({ ...base, toVersion: 2, ids: [a, b, c] });
    expect(refused.items.map((i) => [i.status, i.error?.code ?? null])).toEqual([
      ['failed', 'FLOW_MIGRATE_WRONG_VERSION'],
      ['failed', 'FLOW_MIGRATE_PROCESSING'],
      ['failed', 'FLOW_MIGRATE_STATE'],
    ]);
    const plan = await engine.ops.migrations.preview({ ...base, toVersion: 2, ids: [b] }, OPS, { env: ENV });
    expect(plan.items[0]?.refusal).toMatchObject({ code: 'FLOW_MIGRATE_PROCESSING', retryable: true });
    // a refusal writes nothing: no audit row, the version unchanged
    expect(await engine.ops.audit(b, { env: ENV })).toEqual([]);
    expect((await engine.get(c, ENV)).version).toBe(1);
    await asScheduler(engine.db, (q) => q.query(`UPDATE workflows SET state = 'waiting', lease_token = NULL, lease_expires_at = NULL WHERE id = $1`, [b]));
  });

  it('an instance whose call is under way moves only where the call still goes, under its name, keeping its key and its backoff', async () => {
    const logicId = `t.migrate${++counter}`;
    let first = true;
    svc.on('/flaky', () => {
      if (!first) return { status: 200, body: {} };
      first = false;
      return { status: 503, body: {} };
    });
    const flaky = (version: number, path: string, name = 'call') =>
      makeLogic({ logicId, version, start: name, steps: { [name]: { kind: 'proxy', handler: 'test', path, retry: { maxAttempts: 3, initialMs: 3_600_000 } } } });
    await engine.publish(flaky(1, '/flaky'), ENV);
    await engine.publish(flaky(2, '/flaky-v2'), ENV);
    await engine.publish(flaky(3, '/flaky', 'charge'), ENV);
    await engine.publish(flaky(4, '/flaky'), ENV);
    const { id } = await engine.start({ logicId, version: 1, input: {}, env: ENV });
    await engine.workers.drain();
    expect(await engine.get(id, ENV)).toMatchObject({ state: 'pending', currentStep: 'call' });
    const plan = await engine.ops.migrations.preview({ logicId, fromVersion: 1, toVersion: 2, ids: [id], reason: 'x' }, OPS, { env: ENV });
    expect(plan.items[0]?.refusal).toMatchObject({ code: 'FLOW_MIGRATE_UNSAFE', reasons: [{ code: 'FLOW_COMPAT_CALL_CHANGED', step: 'call' }] });
    // the same call under another step name: a retry of it would be keyed by the new name
    const renamed = await engine.ops.migrations.preview({ logicId, fromVersion: 1, toVersion: 3, ids: [id], renames: { call: 'charge' }, reason: 'x' }, OPS, { env: ENV });
    expect(renamed.items[0]?.refusal).toMatchObject({ code: 'FLOW_MIGRATE_RENAME_IN_FLIGHT' });
    // where the call still goes, it moves in its backoff: the retry keeps its key and its due time
    const due = async () =>
      (await asScheduler(engine.db, (q) => q.query<{ due: string }>(`SELECT run_at::text AS due, run_at > now() AS later FROM workflows WHERE id = $1`, [id]))).rows[0];
    const before = await due();
    expect(await job({ logicId, fromVersion: 1, toVersion: 4, ids: [id], reason: 'same call' })).toMatchObject({ done: 1, failed: 0 });
    expect(await due()).toEqual(before);
    expect(before).toMatchObject({ later: true });
    await asScheduler(engine.db, (q) => q.query(`UPDATE workflows SET run_at = now() WHERE id = $1`, [id]));
    await engine.workers.drain();
    expect(await engine.get(id, ENV)).toMatchObject({ state: 'completed', version: 4 });
    expect(svc.calls('/flaky').map((r) => r.headers['idempotency-key'])).toEqual([`${id}:call:0`, `${id}:call:0`]);
  });

  it('refuses a retired target (409, FLOW_MIGRATE_TARGET_RETIRED) unless the request allows it, in the dry run and in the job', async () => {
    const { vs, ids } = await story(1);
    const id = ids[0]!;
    await engine.setVersionActive(ENV, vs.v1.logicId, 2, false);
    const req = { logicId: vs.v1.logicId, fromVersion: 1, toVersion: 2, ids: [id], reason: 'fraud check' };
    await expect(engine.ops.migrations.preview(req, OPS, { env: ENV })).rejects.toMatchObject({ code: 'FLOW_MIGRATE_TARGET_RETIRED', status: 409 });
    await expect(job(req)).rejects.toMatchObject({ code: 'FLOW_MIGRATE_TARGET_RETIRED' });
    expect(await engine.ops.migrations.preview({ ...req, allowRetired: true }, OPS, { env: ENV })).toMatchObject({ moves: 1 });
    // the job keeps the permission: each move checks the target again
    expect(await job({ ...req, allowRetired: true })).toMatchObject({ done: 1, failed: 0 });
    expect((await engine.get(id, ENV)).version).toBe(2);
  });

  it('refuses a target that is not a later version, a rename map that does not fit, and a caller without flow:migrate on the definition', async () => {
    const { vs } = await story(0);
    const base = { logicId: vs.v1.logicId, reason: 'x' };
    const preview = (req: object, who = OPS) => engine.ops.migrations.preview({ ...base, fromVersion: 2, toVersion: 4, ...req }, who, { env: ENV });
    await expect(preview({ toVersion: 1 })).rejects.toMatchObject({ code: 'FLOW_MIGRATE_BAD_TARGET', status: 422 });
    await expect(preview({ toVersion: 9 })).rejects.toMatchObject({ code: 'FLOW_NOT_FOUND' });
    await expect(preview({ renames: { nope: 'review' } })).rejects.toMatchObject({ code: 'FLOW_MIGRATE_BAD_RENAME' });
    // renamed away, but v4 has a step of that name: its calls would carry the old step's keys
    await expect(preview({ renames: { fraud: 'charge' } })).rejects.toMatchObject({ code: 'FLOW_MIGRATE_BAD_RENAME' });
    await expect(preview({ ids: [randomUUID()], filter: { state: 'waiting' } })).rejects.toMatchObject({ code: 'FLOW_MIGRATE_BAD_SELECTION' });
    // an id not in this env (missing, or another env's: row-level security hides it) is left out of the dry run, and its job item is a 404
    const stranger = randomUUID();
    expect(await preview({ fromVersion: 1, toVersion: 2, ids: [stranger] })).toMatchObject({ selected: 0 });
    expect((await job({ ...base, fromVersion: 1, toVersion: 2, ids: [stranger] })).items).toEqual([
      { workflowId: stranger, status: 'failed', state: null, error: { code: 'FLOW_NOT_FOUND', message: expect.any(String) } },
    ]);
    const narrowed = { subject: 'team@example.com', scopes: ['flow:migrate:other.*'] };
    await expect(preview({}, narrowed)).rejects.toMatchObject({ code: 'FLOW_SCOPE_MISSING', status: 403 });
    const ok = { subject: 'team@example.com', scopes: [`flow:migrate:${vs.v1.logicId}`] };
    expect(await preview({}, ok)).toMatchObject({ selected: 0 });
  });
});


