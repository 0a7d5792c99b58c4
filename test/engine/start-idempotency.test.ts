import { beforeAll, expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { describeEachDriver } from '../support/db.ts';
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
 * A start is on the path to the first call, so its round trips count: the transaction's BEGIN
 * (with the env), the version it starts, one statement for the row with its first attempt and
 * journal row (migration 0042), and COMMIT. A repeat with the same key is the same four.
 */
describeEachDriver('the statements of a start', (getDb) => {
  it('a start sends four statements in its transaction, a repeat with its key the same four', async () => {
    const db = getDb();
    const engine = new Engine({ db, env: ENV });
    const logic = uniqueLogic({ start: 'wait', steps: { wait: { kind: 'decision', options: ['ok'] } } });
    await engine.publish(logic);
    await engine.start({ logicId: logic.logicId, input: {} }); // the version is cached from here on

    // every statement sent on a checked-out client, in order (a client is wrapped once: the pool hands the same one out again)
    const sent: string[] = [];
    const wrapped = new WeakSet<object>();
    const connect = db.pool.connect.bind(db.pool);
    db.pool.connect = (async () => {
      const client = await connect();
      if (!wrapped.has(client)) {
        wrapped.add(client);
        const query = client.query.bind(client) as (...args: unknown[]) => unknown;
        client.query = ((config: string | { text: string }, ...rest: unknown[]) => {
          sent.push(typeof config === 'string' ? config : config.text);
          return query(config, ...rest);
        }) as typeof client.query;
      }
      return client;
    }) as typeof db.pool.connect;
    try {
      const first = await engine.start({ logicId: logic.logicId, input: { n: 1 }, idempotencyKey: 'counted' });
      const again = await engine.start({ logicId: logic.logicId, input: { n: 1 }, idempotencyKey: 'counted' });
      expect(again).toEqual({ id: first.id, created: false });
    } finally {
      db.pool.connect = connect as typeof db.pool.connect;
    }
    // the transactions, each from its BEGIN
    const txs: string[][] = [];
    for (const q of sent) {
      if (q.startsWith('BEGIN')) txs.push([q]);
      else txs.at(-1)?.push(q);
    }
    const starts = txs.filter((s) => s.some((q) => q.includes('FROM logic_versions')));
    expect(starts.map((s) => s.length)).toEqual([4, 4]);
    expect(starts[0]![0]).toMatch(/^BEGIN; SELECT set_config\('app.env_id'/);
    expect(starts[0]![3]).toBe('COMMIT');
  });
});
