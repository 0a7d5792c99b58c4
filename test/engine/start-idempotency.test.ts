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
