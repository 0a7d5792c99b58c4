import { Writable } from 'node:stream';
import { setImmediate as tick, setTimeout as sleep } from 'node:timers/promises';
import { expect, it } from 'vitest';
import { TERMINAL_STATES, type WorkflowState } from '../../contracts/index.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { createLogger } from '../../engine/runtime/log.ts';
import type { Db } from '../../engine/store/db.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { OPERATOR } from '../support/engine.ts';
import { FakeService, gatedService } from '../support/fake-service.ts';

const ENV = 'lease-env';

/**
 * `notices` (heard on flow_lease_taken) holds none for this test's instances: they arrive in
 * commit order, so once a last one is heard, any sent before are too. The channel is the
 * database's: other test files' schemas on the same server notify on it too, so only the notices
 * naming an instance of this store count.
 */
async function expectNoNotice(db: Db, notices: string[]): Promise<void> {
  await db.pool.query(`SELECT pg_notify('flow_lease_taken', 'last')`);
  while (!notices.includes('last')) await sleep(5);
  const ours = new Set((await db.pool.query<{ id: string }>('SELECT id::text FROM workflows')).rows.map((r) => r.id));
  expect(notices.filter((n) => n === 'last' || ours.has(n.split(':')[0]!))).toEqual(['last']);
}
const logic = makeLogic({ logicId: 'lease.gate', start: 's0', steps: { s0: { kind: 'proxy', path: '/gate' } } });

// A worker pool holds up to twice `concurrency` instances: those beyond the executors wait in
// line for one, leased and `processing`. An operator who cancels such an instance is told it is
// cancelled; its step must then never be called. The pool used to learn that the lease was taken
// only from its next heartbeat (every leaseMs / 3), and an executor that freed before then ran the
// cancelled instance's step anyway: an effect after an acknowledged cancel.
describeEachDriver('a lease taken from a pool reaches it at once', (getDb) => {
  it('a cancelled instance waiting in the pool for an executor is never called', async () => {
    const { svc, open } = await gatedService('/gate');
    const lost: string[] = [];
    const lines: Record<string, unknown>[] = [];
    const destination = new Writable({
      write(chunk, _enc, done) {
        for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
        done();
      },
    });
    // heartbeats far beyond the test: only the fence notice can tell the pool
    const engine = new Engine({
      db: getDb(),
      env: ENV,
      executors: { handlers: new Map([['TEST', { url: svc.url }]]) },
      worker: { concurrency: 2, pollMs: 600_000, leaseMs: 600_000 },
      observer: {
        onLeaseLost: (id) => void lost.push(id),
      },
      logger: createLogger({ destination }),
    });
    await engine.publish(logic);
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push((await engine.start({ logicId: logic.logicId, input: {}, env: ENV })).id);
    await engine.workers.start();
    // one claim of four: two executing (their calls held at the gate), two in line
    while (svc.calls('/gate').length < 2 || engine.workers.inflight < 4) await tick();
    const called = () => svc.calls('/gate').map((c) => c.headers['x-flow-workflow-id']);
    const inLine = ids.filter((id) => !called().includes(id));
    expect(inLine).toHaveLength(2);
    const [victim, other] = inLine as [string, string];

    expect((await engine.ops.cancel(victim, { reason: 'stop it' }, { ...OPERATOR, env: ENV })).state).toBe('cancelled');
    for (let waited = 0; !lost.includes(victim) && waited < 10_000; waited += 10) await sleep(10);
    open();
    for (;;) {
      const states = await Promise.all(ids.map(async (id) => (await engine.get(id, ENV)).state as WorkflowState));
      if (states.every((s) => TERMINAL_STATES.has(s)) && engine.workers.inflight === 0) break;
      await sleep(10);
    }

    expect(called()).not.toContain(victim);
    expect(called()).toContain(other);
    expect(lost).toEqual([victim]);
    // and the log says so, naming the instance
    expect(lines.filter((l) => String(l['msg']).startsWith('lease lost'))).toEqual([
      expect.objectContaining({ env: ENV, logicId: logic.logicId, workflowId: victim, step: 's0', event: 'lease_lost', level: 40 }),
    ]);
    expect((await engine.get(victim, ENV)).state).toBe('cancelled');
    await engine.close();
    await svc.close();
  });

  // A NOTIFY holds Postgres's notify lock until its WAL is flushed (migration 0013): a notice on a
  // worker's own commits would cost every step. Parking, waking, a retry's backoff and the end all
  // hand the lease over or keep it, and none of them is a taking.
  it('a pool’s own commits send no notice', async () => {
    let tries = 0;
    const svc = await new FakeService().on('/flaky', () => (++tries === 1 ? { status: 503 } : { status: 200, body: { ok: true } })).listen();
    const db = getDb();
    const notices: string[] = [];
    const unlisten = await db.listen('flow_lease_taken', (p) => void notices.push(p));
    const engine = new Engine({ db, env: ENV, executors: { handlers: new Map([['TEST', { url: svc.url }]]) }, worker: { concurrency: 2, pollMs: 20 } });
    const flow = makeLogic({
      logicId: 'lease.own',
      start: 'wait',
      steps: { wait: { kind: 'delay', duration: 'PT0S', next: 'call' }, call: { kind: 'proxy', path: '/flaky', retry: { maxAttempts: 2 } } },
    });
    await engine.publish(flow);
    const { id } = await engine.start({ logicId: flow.logicId, input: {}, env: ENV });
    await engine.workers.start();
    while ((await engine.get(id, ENV)).state !== 'completed') await sleep(10);
    expect(tries).toBe(2);
    await expectNoNotice(db, notices);
    await unlisten();
    await engine.close();
    await svc.close();
  });

  // Each child's end wakes its parent, and until the last one has ended the parent's worker finds
  // nothing to do and lets it go (releaseWakes): a fan-out of n children does that n − 1 times.
  it('a parent woken while its children still run is let go without a notice', async () => {
    let open: () => void = () => {};
    const gate = new Promise<void>((r) => (open = r));
    const svc = await new FakeService()
      .on('/child', async (req) => {
        if ((req.body as { n?: string }).n === 'slow') await gate;
        return { status: 200, body: { ok: true } };
      })
      .listen();
    const db = getDb();
    const notices: string[] = [];
    const unlisten = await db.listen('flow_lease_taken', (p) => void notices.push(p));
    const engine = new Engine({ db, env: ENV, executors: { handlers: new Map([['TEST', { url: svc.url }]]) }, worker: { concurrency: 4, pollMs: 20 } });
    const child = makeLogic({ logicId: 'lease.child', start: 'call', steps: { call: { kind: 'proxy', path: '/child' } } });
    const parent = makeLogic({
      logicId: 'lease.parent',
      start: 'fan',
      steps: { fan: { kind: 'children', logicId: child.logicId, items: '["fast", "slow"]', itemInput: '{ "n": item }', failurePolicy: 'all_settled' } },
    });
    await engine.publish(child);
    await engine.publish(parent);
    const { id } = await engine.start({ logicId: parent.logicId, input: {}, env: ENV });
    await engine.workers.start();
    const row = async (sql: string) => (await db.pool.query(sql, [id])).rows[0] as Record<string, unknown> | undefined;
    // the fast child's end woke the parent in the same commit; its wakes cleared means it was let go
    while ((await row(`SELECT 1 FROM workflows WHERE parent_id = $1 AND input->>'n' = 'fast' AND state = 'completed'`)) === undefined) await sleep(10);
    while ((await row(`SELECT 1 FROM workflows WHERE id = $1 AND state = 'waiting' AND wakes IS NULL AND lease_token IS NULL`)) === undefined) await sleep(10);
    open();
    while ((await engine.get(id, ENV)).state !== 'completed') await sleep(10);
    await expectNoNotice(db, notices);
    await unlisten();
    await engine.close();
    await svc.close();
  });
});
