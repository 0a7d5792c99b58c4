import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Transition } from '../../engine/core/transition.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { type Db, openDb } from '../../engine/store/db.ts';
import { closeTestDb, openTestDb } from '../support/db.ts';
import { uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';
import { PgProxy } from '../support/pg-proxy.ts';

/**
 * A commit whose acknowledgement is lost is not a fence. The connection dies after
 * commit_transition() committed (a proxy swallows the answer and cuts it); the worker's retry
 * finds row_version moved. It must recognise its own commit — the receipt the commit wrote: its
 * lease token and the row version — and run on, rather than drop an instance whose lease it
 * still holds. The lease here is ten minutes: a worker that mistakes its own commit for a fence
 * leaves the instance `processing` and unclaimable, and drain() returns with it stuck.
 */
const DATABASE_URL = process.env['DATABASE_URL'];
const ENV = 'lost-ack';

describe.skipIf(!DATABASE_URL)('a lost commit acknowledgement', () => {
  let db: Db;
  let proxied: Db;
  let proxy: PgProxy;
  let svc: FakeService;
  let engine: Engine;
  const transitions: { from: string; to: string; committed: boolean }[] = [];

  beforeAll(async () => {
    db = await openTestDb('postgres');
    proxy = await new PgProxy(new URL(DATABASE_URL!)).listen();
    proxied = await openDb(proxy.url, { schema: db.schema, poolSize: 3 });
    svc = await new FakeService()
      .on('/first', () => ({ status: 200, body: { first: true } }))
      .on('/second', () => ({ status: 200, body: { second: true } }))
      .listen();
    engine = new Engine({
      db: proxied,
      env: ENV,
      executors: { handlers: new Map([['TEST', { url: svc.url }]]) },
      worker: { concurrency: 1, leaseMs: 600_000 },
      observer: {
        onTransition: (from, t: Transition, committed) => transitions.push({ from: from.state, to: t.instance.state, committed }),
      },
    });
  });

  afterAll(async () => {
    await svc?.close();
    await proxied?.close();
    await proxy?.close();
    if (db) await closeTestDb(db);
  });

  it('the worker recognises its own commit and runs on under its lease', async () => {
    const logic = uniqueLogic({
      start: 'first',
      steps: {
        first: { kind: 'proxy', handler: 'test', path: '/first', next: 'second' },
        second: { kind: 'proxy', handler: 'test', path: '/second' },
      },
    });
    await engine.publish(logic, ENV);
    const { id } = await engine.start({ logicId: logic.logicId, input: {}, env: ENV });

    // the first commit (step `first` done, lease kept for `second`) lands; its answer is lost
    proxy.loseAnswerTo('commit_journaled');
    await engine.workers.drain();

    expect(proxy.cuts).toBe(1);
    const row = (await db.pool.query('SELECT state, lease_token FROM workflows WHERE id = $1', [id])).rows[0];
    expect(row).toEqual({ state: 'completed', lease_token: null });
    expect(transitions).toEqual([
      // the commit whose answer was lost: reported as committed, and the worker ran on
      { from: 'processing', to: 'processing', committed: true },
      { from: 'processing', to: 'completed', committed: true },
    ]);
    // each step ran once: the retry wrote nothing twice
    expect(svc.calls('/first')).toHaveLength(1);
    expect(svc.calls('/second')).toHaveLength(1);
    const runs = await db.pool.query('SELECT step, attempt, state FROM step_runs WHERE workflow_id = $1 ORDER BY seq', [id]);
    expect(runs.rows).toEqual([
      { step: 'first', attempt: 1, state: 'succeeded' },
      { step: 'second', attempt: 1, state: 'succeeded' },
    ]);
  }, 60_000);

  it('a lost answer to a commit that hands the instance over is reported as committed, not fenced', async () => {
    let calls = 0;
    svc.on('/flaky', () => (++calls === 1 ? { status: 503, body: { message: 'once' } } : { status: 200, body: { ok: true } }));
    const logic = uniqueLogic({
      start: 'flaky',
      steps: { flaky: { kind: 'proxy', handler: 'test', path: '/flaky', retry: { maxAttempts: 3, initialMs: 1 } } },
    });
    await engine.publish(logic, ENV);
    const { id } = await engine.start({ logicId: logic.logicId, input: {}, env: ENV });
    transitions.length = 0;

    // the commit of the retry (pending, lease let go) lands; its answer is lost
    proxy.loseAnswerTo('commit_journaled');
    await engine.workers.drain();
    // the retry is due a millisecond later: drain again until it has run (a bounded number of times)
    for (let round = 0; round < 50; round++) {
      if ((await db.pool.query('SELECT state FROM workflows WHERE id = $1', [id])).rows[0].state === 'completed') break;
      await engine.workers.drain();
    }

    expect(proxy.cuts).toBe(2);
    expect(transitions).toEqual([
      { from: 'processing', to: 'pending', committed: true },
      { from: 'processing', to: 'completed', committed: true },
    ]);
  }, 60_000);
});
