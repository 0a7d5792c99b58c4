import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Engine } from '../../engine/runtime/engine.ts';
import { describeEachDriver } from '../support/db.ts';
import { OPERATOR, settle, testEngine, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';
import { attemptViolations } from '../support/store-checks.ts';

/**
 * Cancelling a parent reaches its whole tree (three levels, on the real engine): every
 * descendant ends `cancelled` — the one mid-compensation too — with `compensate: true` each runs
 * its own compensations first, and no attempt row is left `running` or `parked`.
 *
 *   root:   charge (refund) → fan: children of `mid` for [deep, undo, decide]
 *   mid:    charge (refund) → by mode:
 *             deep   → fan: children of `leaf` for two items (each charges, then parks on a 202)
 *             undo   → boom (422): compensating, its refund failing 503 until the test lets it
 *             decide → a decision: parked
 */
describeEachDriver('cancel reaches the whole tree', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  let refundDown = true;

  const undo = (path: string) => ({ kind: 'proxy' as const, handler: 'test', path, input: '{ "who": input.who }', retry: { maxAttempts: 5, initialMs: 600_000 } });
  const leaf = uniqueLogic({
    start: 'charge',
    steps: {
      charge: { kind: 'proxy', handler: 'test', path: '/charge', input: '{ "who": input.who }', compensate: undo('/refund'), next: 'later' },
      later: { kind: 'proxy', handler: 'test', path: '/later', input: '{ "who": input.who }' },
    },
  });
  const mid = uniqueLogic({
    start: 'charge',
    steps: {
      charge: { kind: 'proxy', handler: 'test', path: '/charge', input: '{ "who": input.who }', compensate: undo('/refund'), next: 'route' },
      route: {
        kind: 'choice',
        branches: [
          { when: 'input.mode = "deep"', next: 'fan' },
          { when: 'input.mode = "undo"', next: 'boom' },
        ],
        otherwise: 'ask',
      },
      fan: { kind: 'children', logicId: leaf.logicId, items: '["a", "b"]', itemInput: '{ "who": $$.input.who & "/" & item }', failurePolicy: 'all_settled' },
      boom: { kind: 'proxy', handler: 'test', path: '/boom' },
      ask: { kind: 'decision', options: ['go'] },
    },
  });
  const root = uniqueLogic({
    start: 'charge',
    steps: {
      charge: { kind: 'proxy', handler: 'test', path: '/charge', input: '{ "who": input.who }', compensate: undo('/refund'), next: 'fan' },
      fan: {
        kind: 'children',
        logicId: mid.logicId,
        items: '["deep", "undo", "decide"]',
        itemInput: '{ "who": item, "mode": item }',
        failurePolicy: 'all_settled',
      },
    },
  });

  beforeAll(async () => {
    svc = await new FakeService()
      .on('/charge', () => ({ status: 200, body: { charged: true } }))
      .on('/later', () => ({ status: 202, body: { status: 'waiting' } }))
      .on('/boom', () => ({ status: 422, body: { message: 'no' } }))
      .on('/refund', (r) =>
        refundDown && (r.body as { who: string }).who === 'undo' ? { status: 503, body: { message: 'down' } } : { status: 200, body: { refunded: true } },
      )
      .listen();
    engine = testEngine(getDb(), svc);
    for (const logic of [leaf, mid, root]) await engine.publish(logic, 'test-env');
  });
  afterAll(() => svc.close());

  /** The tree of `id`, each instance as `who:state`, ordered by who. */
  async function tree(id: string): Promise<string[]> {
    const res = await getDb().pool.query<{ who: string; state: string }>(
      `WITH RECURSIVE t AS (SELECT id, input, state FROM workflows WHERE id = $1
                            UNION ALL SELECT w.id, w.input, w.state FROM workflows w JOIN t ON w.parent_id = t.id)
       SELECT coalesce(input->>'who', 'root') AS who, state FROM t`,
      [id],
    );
    // sorted here: the server's collation need not agree with JS on 'deep/a' and 'deep'
    return res.rows.sort((a, b) => (a.who < b.who ? -1 : 1)).map((r) => `${r.who}:${r.state}`);
  }

  async function openAttempts(id: string): Promise<string[]> {
    const res = await getDb().pool.query<{ a: string }>(
      `WITH RECURSIVE t AS (SELECT id, input FROM workflows WHERE id = $1
                            UNION ALL SELECT w.id, w.input FROM workflows w JOIN t ON w.parent_id = t.id)
       SELECT coalesce(t.input->>'who', 'root') || ' ' || s.step || ' ' || s.kind || ' ' || s.state AS a
       FROM step_runs s JOIN t ON t.id = s.workflow_id WHERE s.state IN ('running', 'parked')`,
      [id],
    );
    return res.rows.map((r) => r.a).sort();
  }

  /** Runs a fresh tree until it is in place: leaves parked on their 202, `undo` stuck compensating, `decide` parked. */
  async function grow(): Promise<string> {
    refundDown = true;
    const { id } = await engine.start({ logicId: root.logicId, input: { who: 'root' }, env: 'test-env' });
    await engine.workers.drain(); // no fast-forward: the failing refund waits out its long backoff
    expect(await tree(id)).toEqual([
      'decide:waiting',
      'deep:waiting',
      'deep/a:waiting',
      'deep/b:waiting',
      'root:waiting',
      'undo:compensating',
    ]);
    return id;
  }

  const refunds = () => svc.calls('/refund').filter((r) => r.headers['idempotency-key'] !== undefined);
  const refunded = () => [...new Set(refunds().map((r) => (r.body as { who: string }).who))].sort();

  it('cancel with compensate: every descendant runs its compensations and ends cancelled, no attempt left open', async () => {
    const id = await grow();
    svc.received.length = 0;
    await engine.ops.cancel(id, { reason: 'customer withdrew', compensate: true }, OPERATOR);
    refundDown = false;
    await settle(engine);

    expect(await tree(id)).toEqual(['decide:cancelled', 'deep:cancelled', 'deep/a:cancelled', 'deep/b:cancelled', 'root:cancelled', 'undo:cancelled']);
    expect(refunded()).toEqual(['decide', 'deep', 'deep/a', 'deep/b', 'root', 'undo']);
    expect(await openAttempts(id)).toEqual([]);
    expect(await attemptViolations(getDb())).toEqual([]);
  });

  it('cancel without compensate: every descendant ends cancelled at once, nothing undone, no attempt left open', async () => {
    const id = await grow();
    svc.received.length = 0;
    await engine.ops.cancel(id, { reason: 'operator stop' }, OPERATOR);
    expect(await tree(id)).toEqual(['decide:cancelled', 'deep:cancelled', 'deep/a:cancelled', 'deep/b:cancelled', 'root:cancelled', 'undo:cancelled']);
    refundDown = false;
    await settle(engine);
    expect(refunded()).toEqual([]);
    expect(await openAttempts(id)).toEqual([]);
    expect(await attemptViolations(getDb())).toEqual([]);
  });
});
