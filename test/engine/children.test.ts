import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Engine } from '../../engine/runtime/engine.ts';
import { TestRunner } from '../../engine/testing/index.ts';
import { describeEachDriver } from '../support/db.ts';
import { OPERATOR, settle, testEngine, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

describeEachDriver('children: fan-out and fan-in', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  beforeAll(async () => {
    svc = await new FakeService()
      .on('/work', (r) => {
        const n = (r.body as { n: number }).n;
        return n < 0 ? { status: 422, body: { message: `cannot work on ${n}` } } : { status: 200, body: { doubled: n * 2 } };
      })
      .listen();
    engine = testEngine(getDb(), svc);
  });
  afterAll(() => svc.close());

  const child = uniqueLogic({
    start: 'work',
    steps: { work: { kind: 'proxy', handler: 'test', path: '/work', input: '{ "n": input.n }' } },
  });
  const parent = (failurePolicy: 'fail_fast' | 'all_settled', extra = {}) =>
    uniqueLogic({
      start: 'fan',
      steps: {
        fan: { kind: 'children', logicId: child.logicId, items: 'input.ns', itemInput: '{ "n": item, "i": index }', failurePolicy, ...extra },
      },
    });

  beforeAll(async () => {
    await engine.publish(child, 'test-env');
  });

  async function run(logic: ReturnType<typeof parent>, ns: number[]) {
    await engine.publish(logic, 'test-env');
    const { id } = await engine.start({ logicId: logic.logicId, input: { ns }, env: 'test-env' });
    await settle(engine);
    return engine.get(id, 'test-env');
  }

  async function childrenOf(id: string) {
    const res = await getDb().pool.query('SELECT branch_index, state, input FROM workflows WHERE parent_id = $1 ORDER BY branch_index', [id]);
    return res.rows as { branch_index: number; state: string; input: unknown }[];
  }

  it('spawns one child per item with the parent id and branch index, and resumes with outputs in item order', async () => {
    const record = await run(parent('fail_fast'), [3, 1, 2]);
    expect(record.state).toBe('completed');
    expect(record.output).toEqual([{ doubled: 6 }, { doubled: 2 }, { doubled: 4 }]);
    const children = await childrenOf(record.id);
    expect(children.map((c) => [c.branch_index, c.state, c.input])).toEqual([
      [0, 'completed', { n: 3, i: 0 }],
      [1, 'completed', { n: 1, i: 1 }],
      [2, 'completed', { n: 2, i: 2 }],
    ]);
  });

  it('gives each child the id the in-process runner gives it: one rule, derived from the parent, the spawn and the item', async () => {
    const logic = parent('fail_fast');
    const record = await run(logic, [5, 6, 7]);
    const engineIds = (await getDb().pool.query<{ id: string }>('SELECT id FROM workflows WHERE parent_id = $1 ORDER BY branch_index', [record.id])).rows.map((r) => r.id);
    const runner = new TestRunner(logic, { 'test/work': (call) => ({ status: 'succeeded', output: { doubled: (call.input as { n: number }).n * 2 } }) }, { logics: [child] });
    const { flow } = await runner.run({ ns: [5, 6, 7] }, { id: record.id, env: 'test-env' });
    expect(flow.instance.state).toBe('completed');
    expect(flow.children.map((c) => c.instance.id)).toEqual(engineIds);
  });

  it('fail_fast fails the parent on the first failed child', async () => {
    const record = await run(parent('fail_fast'), [1, -1, 2]);
    expect(record.state).toBe('failed');
    expect(record.error?.code).toBe('CHILD_FAILED');
  });

  it('all_settled waits for every child and reports each ending', async () => {
    const record = await run(parent('all_settled'), [1, -1]);
    expect(record.state).toBe('completed');
    expect(record.output).toEqual([
      { state: 'completed', output: { doubled: 2 }, error: null },
      { state: 'failed', output: null, error: expect.objectContaining({ code: 'HTTP_422' }) },
    ]);
  });

  it('no items means an empty output without parking', async () => {
    const record = await run(parent('fail_fast'), []);
    expect(record.state).toBe('completed');
    expect(record.output).toEqual([]);
  });

  it('cancelling a parent cancels its waiting children', async () => {
    const slowChild = uniqueLogic({ start: 'hold', steps: { hold: { kind: 'decision', options: ['go'] } } });
    await engine.publish(slowChild, 'test-env');
    const logic = uniqueLogic({
      start: 'fan',
      steps: { fan: { kind: 'children', logicId: slowChild.logicId, items: 'input.ns', itemInput: 'item', failurePolicy: 'fail_fast' } },
    });
    const record = await run(logic, [1, 2]);
    expect(record.state).toBe('waiting');
    expect((await childrenOf(record.id)).map((c) => c.state)).toEqual(['waiting', 'waiting']);
    await engine.ops.cancel(record.id, { reason: 'stop' }, { ...OPERATOR, env: 'test-env' });
    expect((await childrenOf(record.id)).map((c) => c.state)).toEqual(['cancelled', 'cancelled']);
  });

  it('refuses to publish a workflow whose children are not published', async () => {
    const orphan = uniqueLogic({
      start: 'fan',
      steps: { fan: { kind: 'children', logicId: 'not.published', items: '[]', itemInput: 'item', failurePolicy: 'fail_fast' } },
    });
    await expect(engine.publish(orphan, 'test-env')).rejects.toMatchObject({ code: 'FLOW_CHILD_LOGIC_MISSING' });
  });

  it('fans out to many children and back (1000 on Postgres, 200 on the single-session PGlite)', { timeout: 240_000 }, async () => {
    const ns = Array.from({ length: getDb().driver === 'postgres' ? 1000 : 200 }, (_, i) => i);
    const record = await run(parent('fail_fast'), ns);
    expect(record.state).toBe('completed');
    expect((record.output as { doubled: number }[]).map((o) => o.doubled)).toEqual(ns.map((n) => n * 2));
  });
});
