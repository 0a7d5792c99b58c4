import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BulkJobs } from '../../engine/runtime/bulk-jobs.ts';
import { Changes } from '../../engine/runtime/changes.ts';
import type { Engine } from '../../engine/runtime/engine.ts';
import { finishBulkJob, insertBulkJob } from '../../engine/store/bulk-jobs.ts';
import { inEnv } from '../../engine/store/tx.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle, testEngine, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

const ENV = 'test-env';
const OPS = { subject: 'ops@example.com', scopes: ['flow:admin'] };

describeEachDriver('bulk jobs and change notifications', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  let up = false;
  const logic = uniqueLogic({ start: 'charge', steps: { charge: { kind: 'proxy', handler: 'test', path: '/charge', retry: { maxAttempts: 1 } } } });

  beforeAll(async () => {
    svc = await new FakeService().on('/charge', () => (up ? { status: 200, body: { ok: true } } : { status: 503 })).listen();
    engine = testEngine(getDb(), svc);
    await engine.publish(logic, ENV);
  });
  afterAll(() => svc.close());

  async function deadLettered(n: number): Promise<string[]> {
    up = false;
    const ids: string[] = [];
    for (let i = 0; i < n; i++) ids.push((await engine.start({ logicId: logic.logicId, input: { i }, env: ENV })).id);
    await settle(engine);
    for (const id of ids) expect((await engine.get(id, ENV)).state).toBe('dead_lettered');
    return ids;
  }

  it('a bulk retry fixes its selection, runs the verb per instance as its creator, and records each result', async () => {
    const ids = await deadLettered(3);
    up = true;
    const bulk = new BulkJobs(getDb(), engine.ops);
    const filter = { state: 'dead_lettered', logicId: logic.logicId };
    expect(await bulk.preview(ENV, { filter, reason: 'x' })).toMatchObject({ count: 3 });
    const created = await bulk.start(ENV, 'retry', { filter, reason: 'ledger back' }, OPS);
    expect(created.total).toBe(3);
    await bulk.settled();
    const job = await bulk.get(ENV, created.id);
    expect(job).toMatchObject({ state: 'done', done: 3, failed: 0, actor: 'ops@example.com' });
    expect(job.items.map((i) => i.workflowId).sort()).toEqual([...ids].sort());
    for (const id of ids) {
      const audit = await engine.ops.audit(id, { env: ENV });
      expect(audit.map((a) => [a.verb, a.actor, a.reason])).toContainEqual(['retry', 'ops@example.com', 'ledger back']);
    }
    await settle(engine);
    for (const id of ids) expect((await engine.get(id, ENV)).state).toBe('completed');
  });

  it('a job left running by a stopped process is finished by the next one; an aborted job runs nothing more', async () => {
    const ids = await deadLettered(4);
    up = true;
    const running = randomUUID();
    const aborted = randomUUID();
    await inEnv(getDb(), ENV, async (c) => {
      const base = { env: ENV, verb: 'retry' as const, filter: {}, reason: 'resume me', actor: 'ops@example.com' };
      await insertBulkJob(c, { ...base, id: running, args: { scopes: ['flow:admin'] }, workflowIds: ids.slice(0, 2) });
      await insertBulkJob(c, { ...base, id: aborted, args: { scopes: ['flow:admin'] }, workflowIds: ids.slice(2) });
      await finishBulkJob(c, aborted, 'aborted');
    });
    const next = new BulkJobs(getDb(), engine.ops);
    await next.resume();
    await next.settled();
    expect(await next.get(ENV, running)).toMatchObject({ state: 'done', done: 2, failed: 0 });
    expect(await next.get(ENV, aborted)).toMatchObject({ state: 'aborted', done: 0 });
    for (const id of ids.slice(2)) expect((await engine.get(id, ENV)).state).toBe('dead_lettered');
    // a retry refused by the state is a failed item with its code, not a stopped job
    const again = await next.start(ENV, 'retry', { filter: { logicId: logic.logicId, state: 'dead_lettered' }, reason: 'x', limit: 1 }, OPS);
    await next.settled();
    expect((await next.get(ENV, again.id)).state).toBe('done');
    const refused = new BulkJobs(getDb(), engine.ops);
    const job = await refused.start(ENV, 'cancel', { filter: { logicId: logic.logicId, state: 'completed' }, reason: 'x', limit: 1 }, OPS);
    await refused.settled();
    expect((await refused.get(ENV, job.id)).items[0]).toMatchObject({ status: 'failed', error: { code: 'FLOW_VERB_NOT_ALLOWED' } });
  });

  it('notifies the subscribers of an instance when it changes, and only them', async () => {
    const changes = new Changes(getDb());
    try {
      const [id] = await deadLettered(1);
      const other: string[] = [];
      const heard = new Promise<void>((resolve) => {
        void changes.subscribe(id!, resolve);
      });
      await changes.subscribe(randomUUID(), () => other.push('x'));
      up = true;
      await engine.ops.retry(id!, { actor: OPS, env: ENV, reason: 'go' });
      await heard;
      expect(other).toEqual([]);
    } finally {
      await changes.close();
    }
  });
});
