import { beforeAll, expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import { IN_FLIGHT } from '../../engine/runtime/batcher.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { statementsSent } from '../support/statements.ts';
import { uniqueLogic } from '../support/engine.ts';

const ENV = 'start-keys';

/**
 * A start's idempotency key stands for one request. Repeating the request returns the first
 * instance; the same key with a different request is refused (409), never answered with an
 * instance that is not what the caller asked for.
 */
describeEachDriver('start idempotency keys', (getDb) => {
  let engine: Engine;
  const logic = uniqueLogic({ start: 'wait', steps: { wait: { kind: 'decision', options: ['ok'] } } });
  const other = uniqueLogic({ start: 'wait', steps: { wait: { kind: 'decision', options: ['ok'] } } });

  beforeAll(async () => {
    engine = new Engine({ db: getDb(), env: ENV, callbackAllowlist: ['cb.example'] });
    await engine.publish(logic);
    await engine.publish(other);
  });

  it('the same request with the same key returns the first instance, whatever the order of its fields', async () => {
    const first = await engine.start({ logicId: logic.logicId, input: { a: 1, b: { c: 2, d: 3 } }, idempotencyKey: 'k-same' });
    const again = await engine.start({ idempotencyKey: 'k-same', input: { b: { d: 3, c: 2 }, a: 1 }, logicId: logic.logicId });
    expect(first.created).toBe(true);
    expect(again).toEqual({ id: first.id, created: false });
  });

  it('the same key with a different request is refused with FLOW_IDEMPOTENCY_MISMATCH (409), and nothing is started', async () => {
    const first = await engine.start({ logicId: logic.logicId, input: { amount: 10 }, idempotencyKey: 'k-diff' });
    const refused = { code: 'FLOW_IDEMPOTENCY_MISMATCH', status: 409 };
    await expect(engine.start({ logicId: logic.logicId, input: { amount: 11 }, idempotencyKey: 'k-diff' })).rejects.toMatchObject(refused);
    await expect(
      engine.start({ logicId: logic.logicId, input: { amount: 10 }, idempotencyKey: 'k-diff', correlationId: 'c-1' }),
    ).rejects.toMatchObject(refused);
    await expect(
      engine.start({ logicId: logic.logicId, input: { amount: 10 }, idempotencyKey: 'k-diff', callback: { url: 'https://cb.example/x' } }),
    ).rejects.toMatchObject(refused);
    // still answered for the request it was first used with
    expect(await engine.start({ logicId: logic.logicId, input: { amount: 10 }, idempotencyKey: 'k-diff' })).toEqual({
      id: first.id,
      created: false,
    });
    const count = await asScheduler(getDb(), (c) =>
      c.query<{ n: number }>(`SELECT count(*)::int AS n FROM workflows WHERE idempotency_key = 'k-diff'`),
    );
    expect(count.rows[0]!.n).toBe(1);
  });

  it('keys are per definition: the same key starts another definition, and each repeats its own', async () => {
    const first = await engine.start({ logicId: logic.logicId, input: { amount: 10 }, idempotencyKey: 'k-per-logic' });
    const second = await engine.start({ logicId: other.logicId, input: { amount: 10 }, idempotencyKey: 'k-per-logic' });
    expect(second.created).toBe(true);
    expect(second.id).not.toBe(first.id);
    expect(await engine.start({ logicId: other.logicId, input: { amount: 10 }, idempotencyKey: 'k-per-logic' })).toEqual({ id: second.id, created: false });
  });
});

/**
 * A start is on the path to the first call, so its round trips count. Once its version is known,
 * a start is one statement: the row with its first attempt and journal row, the version checked
 * in it (migration 0046). A repeat with the same key is the same statement, and so is the API's
 * start, with the record it answers (0047).
 */
describeEachDriver('the statements of a start', (getDb) => {
  it('a start is one statement of its own once its version is known, and so are a repeat with its key and a start that answers its record', async () => {
    const db = getDb();
    const engine = new Engine({ db, env: ENV });
    const logic = uniqueLogic({ start: 'wait', steps: { wait: { kind: 'decision', options: ['ok'] } } });
    await engine.publish(logic);
    await engine.start({ logicId: logic.logicId, input: {} }); // the version is known from here on

    const { result: answered, sent } = await statementsSent(db, async () => {
      const first = await engine.start({ logicId: logic.logicId, input: { n: 1 }, idempotencyKey: 'counted' });
      const again = await engine.start({ logicId: logic.logicId, input: { n: 1 }, idempotencyKey: 'counted' });
      expect(again).toEqual({ id: first.id, created: false });
      // the API's start answers the record, read in the same statement (migration 0047)
      return engine.startRecord({ logicId: logic.logicId, input: { n: 2 } });
    });
    // on a client of the start batcher's (runtime/batcher.ts), alone: nothing else was starting
    const insert = 'client: SELECT id, created, request_hash, record FROM insert_started($1::jsonb, $2::jsonb, $3::jsonb, $4::jsonb)';
    expect(sent).toEqual(['client', insert, 'client', insert, 'client', insert]);
    expect(answered.created).toBe(true);
    expect(answered.record).toEqual(await engine.get(answered.record.id));
    expect(answered.record).toMatchObject({ state: 'waiting', currentStep: 'wait', input: { n: 2 }, steps: [{ step: 'wait', state: 'parked' }] });
  });

  it('starts at once on an engine that does not know their version yet look it up once between them', async () => {
    const db = getDb();
    const logic = uniqueLogic({ start: 'wait', steps: { wait: { kind: 'decision', options: ['ok'] } } });
    await new Engine({ db, env: ENV }).publish(logic);
    const engine = new Engine({ db, env: ENV }); // just booted: it has looked nothing up

    const { result: started, sent } = await statementsSent(db, () => Promise.all(Array.from({ length: 8 }, (_, n) => engine.start({ logicId: logic.logicId, input: { n } }))));
    expect(started.every((s) => s.created)).toBe(true);
    // one transaction looks the version up, once for all eight
    expect(sent.filter((s) => s.includes('FROM logic_versions'))).toHaveLength(1);
  });

  it('starts that arrive together are committed together, each as it would be alone', async () => {
    const db = getDb();
    const engine = new Engine({ db, env: ENV });
    const logic = uniqueLogic({ start: 'wait', steps: { wait: { kind: 'decision', options: ['ok'] } } });
    await engine.publish(logic);
    await engine.start({ logicId: logic.logicId, input: {} }); // the version is known from here on

    // eight at once, the last two with one idempotency key
    const key = (n: number) => (n >= 6 ? { idempotencyKey: 'together' } : {});
    const { result: started, sent } = await statementsSent(db, () =>
      Promise.all(Array.from({ length: 8 }, (_, n) => engine.start({ logicId: logic.logicId, input: { n: Math.min(n, 6) }, ...key(n) }))),
    );
    // the first IN_FLIGHT go out alone, the rest together when one of them returns
    const single = 'client: SELECT id, created, request_hash, record FROM insert_started($1::jsonb, $2::jsonb, $3::jsonb, $4::jsonb)';
    const batch = 'client: SELECT i, id, created, request_hash, record FROM insert_started_batch($1::jsonb)';
    expect(sent.filter((s) => s.includes('insert_started'))).toEqual([...Array.from({ length: IN_FLIGHT }, () => single), batch]);
    // the second start with the key found the first, in the same batch
    expect(started.map((s) => s.created)).toEqual([true, true, true, true, true, true, true, false]);
    expect(started[7]!.id).toBe(started[6]!.id);
    for (const [n, s] of started.slice(0, 7).entries()) {
      const record = await engine.get(s.id);
      expect(record).toMatchObject({ state: 'waiting', currentStep: 'wait', input: { n }, steps: [{ step: 'wait', state: 'parked' }] });
      const journal = await db.pool.query('SELECT n FROM journal WHERE workflow_id = $1', [s.id]);
      expect(journal.rowCount).toBe(1);
    }
  });

  it('a start that holds an executor of its engine goes out alone', async () => {
    const db = getDb();
    const engine = new Engine({ db, env: ENV, worker: { concurrency: 8 } });
    const logic = uniqueLogic({ start: 'wait', steps: { wait: { kind: 'decision', options: ['ok'] } } });
    await engine.publish(logic);
    await engine.start({ logicId: logic.logicId, input: {} }); // the version is known from here on
    await engine.workers.start();
    try {
      // executors free for all four: each is inserted leased to this engine, in a statement of its own
      const { sent } = await statementsSent(db, () => Promise.all(Array.from({ length: 4 }, (_, n) => engine.start({ logicId: logic.logicId, input: { n } }))));
      expect(sent.filter((s) => s.includes('insert_started'))).toEqual(
        Array.from({ length: 4 }, () => 'pool: SELECT id, created, request_hash, record FROM insert_started($1::jsonb, $2::jsonb, $3::jsonb, $4::jsonb)'),
      );
    } finally {
      await engine.close();
    }
  });

  it('a start after its version was retired or a newer one published checks, finds the change and starts what a lookup finds', async () => {
    const db = getDb();
    const engine = new Engine({ db, env: ENV });
    const v1 = uniqueLogic({ start: 'wait', steps: { wait: { kind: 'decision', options: ['ok'] } } });
    await engine.publish(v1);
    await engine.start({ logicId: v1.logicId, input: {} }); // version 1 is known from here on
    // another engine (another node) publishes version 2: this one's start finds it
    const other = new Engine({ db, env: ENV });
    const { hash: _hash, ...body } = v1;
    await other.publish(makeLogic({ ...body, version: 2 }));
    const started = await engine.start({ logicId: v1.logicId, input: {} });
    expect((await engine.get(started.id)).version).toBe(2);
    await engine.start({ logicId: v1.logicId, version: 2, input: {} }); // version 2 asked for by number is known too
    // and version 2 retired there: a start asking for it is refused, as a lookup would
    await other.setVersionActive(ENV, v1.logicId, 2, false);
    await expect(engine.start({ logicId: v1.logicId, version: 2, input: {} })).rejects.toMatchObject({ code: 'FLOW_VERSION_RETIRED' });
    expect((await engine.get((await engine.start({ logicId: v1.logicId, input: {} })).id)).version).toBe(1);
  });
});
