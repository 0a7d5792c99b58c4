import { afterAll, beforeAll, expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import { describeEachDriver } from '../support/db.ts';
import { uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';
import { statementsSent } from '../support/statements.ts';
import { waitFor } from '../support/store-checks.ts';

const ENV = 'start-leased';

/**
 * A start whose engine has an executor free leases the new instance to that engine as it inserts
 * it (migration 0045), and the engine drives it with no claim between. What tells the two
 * paths apart is the row version: a claim moves it on, so a one-step instance ends at 3 when it
 * was claimed (insert, claim, commit) and at 2 when it was leased at its start.
 */
describeEachDriver('a start leased to its engine', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  const logic = uniqueLogic({ domain: 'svc', start: 'call', steps: { call: { kind: 'proxy', path: '/x' } } });

  beforeAll(async () => {
    svc = await new FakeService().on('/x', () => ({ status: 200, body: { ok: true } })).listen();
    // one executor: its room (two instances) is what a reservation the start did not give back would use up
    engine = new Engine({ db: getDb(), env: ENV, executors: { handlers: new Map([['SVC', { url: svc.url }]]) }, worker: { concurrency: 1, pollMs: 20 } });
    await engine.publish(logic);
  });
  afterAll(async () => {
    await engine.close();
    await svc.close();
  });

  /** Starts one instance and answers its row version once it completed. */
  async function rowVersionAtEnd(request: Record<string, unknown> = {}): Promise<number> {
    const { id } = await engine.start({ logicId: logic.logicId, input: {}, ...request });
    return waitFor('the instance completed', async () => {
      const row = (await engine.db.pool.query<{ state: string; row_version: string }>('SELECT state, row_version FROM workflows WHERE id = $1', [id])).rows[0]!;
      return row.state === 'completed' ? Number(row.row_version) : undefined;
    });
  }

  it('is driven without a claim when an executor is free', async () => {
    await engine.workers.start();
    try {
      expect(await rowVersionAtEnd()).toBe(2);
    } finally {
      await engine.workers.stop();
    }
  });

  it('is left to a claim when the pool is not running', async () => {
    const { id } = await engine.start({ logicId: logic.logicId, input: {} });
    await engine.workers.drain();
    const row = (await engine.db.pool.query<{ state: string; row_version: string }>('SELECT state, row_version FROM workflows WHERE id = $1', [id])).rows[0]!;
    expect(row).toEqual({ state: 'completed', row_version: '3' });
  });

  it('gives the room back when the start fails or repeats: the next start is still leased', async () => {
    await engine.workers.start();
    try {
      await engine.start({ logicId: logic.logicId, input: { n: 1 }, idempotencyKey: 'k-room' });
      for (let i = 0; i < 3; i++) {
        // a repeat starts nothing; the same key for another request is refused
        await engine.start({ logicId: logic.logicId, input: { n: 1 }, idempotencyKey: 'k-room' });
        await expect(engine.start({ logicId: logic.logicId, input: { n: 2 }, idempotencyKey: 'k-room' })).rejects.toMatchObject({ code: 'FLOW_IDEMPOTENCY_MISMATCH' });
      }
      await waitFor('the pool idle', async () => (engine.workers.inflight === 0 ? true : undefined));
      expect(await rowVersionAtEnd()).toBe(2);
    } finally {
      await engine.workers.stop();
    }
  });
});

/**
 * A start its engine does not run is told to every node's claim loop (NOTIFY flow_work) once it
 * has committed, not by its own commit (a transaction that notifies commits only after the one
 * before it has flushed: work-announcer.ts). Another node, which polls once an hour here, must
 * still take it at once.
 */
describeEachDriver('a start left to a claim', (getDb) => {
  it('wakes another node’s claim loop, after its commit and in a statement of its own', async () => {
    const svc = await new FakeService().on('/y', () => ({ status: 200, body: { ok: true } })).listen();
    const handlers = new Map([['SVC', { url: svc.url }]]);
    const logic = uniqueLogic({ domain: 'svc', start: 'call', steps: { call: { kind: 'proxy', path: '/y' } } });
    // node A only starts (its pool does not run); node B claims, and polls once an hour
    const nodeA = new Engine({ db: getDb(), env: ENV, executors: { handlers } });
    const nodeB = new Engine({ db: getDb(), env: ENV, executors: { handlers }, worker: { pollMs: 3_600_000 } });
    await nodeA.publish(logic);
    await nodeB.workers.start();
    try {
      await nodeB.workers.drain(); // its first claim, at start-up, has found nothing
      const { sent } = await statementsSent(getDb(), () => nodeA.start({ logicId: logic.logicId, input: {} }));
      // (node B shares the pool here, and its loops may send their own statements meanwhile)
      expect(sent.filter((s) => s.includes('insert_started(') || s.includes('pg_notify('))).toEqual([
        'client: SELECT id, created, request_hash, record FROM insert_started($1::jsonb, $2::jsonb, $3::jsonb, $4::jsonb)',
        "pool: SELECT pg_notify('flow_work', '')",
      ]);
      await waitFor('node B calls the service', async () => (svc.calls('/y').length === 1 ? true : undefined));
    } finally {
      await nodeB.close();
      await nodeA.close();
      await svc.close();
    }
  });
});
