import { afterAll, beforeAll, expect, it } from 'vitest';
import type { StepDef } from '../../contracts/index.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

const ENV = 'expr-failures';

/**
 * A mapping that throws at run time (a JSONata type error, `$number("x")`, a runaway recursion)
 * is a permanent failure of its step, recorded with the step and field: the step takes onError,
 * or the workflow fails and compensates. Nothing escapes into the worker loop, so nothing is
 * retried by a later claimer.
 */
describeEachDriver('a failing expression fails its step, once', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  const errors: unknown[] = [];

  beforeAll(async () => {
    svc = await new FakeService()
      .on('/reserve', () => ({ status: 200, body: { id: 'r-1', amount: 'twelve' } }))
      .on('/release', () => ({ status: 200, body: {} }))
      .listen();
    engine = new Engine({
      db: getDb(),
      env: ENV,
      executors: { handlers: new Map([['TEST', { url: svc.url }]]) },
      observer: { onError: (_id, err) => errors.push(err) },
    });
  });
  afterAll(async () => {
    await engine?.close();
    await svc?.close();
  });

  const reserveThen = (next: Record<string, StepDef>, extra: Partial<StepDef> = {}) =>
    uniqueLogic({
      start: 'reserve',
      steps: {
        reserve: { kind: 'proxy', path: '/reserve', compensate: { kind: 'proxy', path: '/release' }, next: 'convert', ...extra } as StepDef,
        ...next,
      },
    });

  async function run(logic: ReturnType<typeof uniqueLogic>) {
    await engine.publish(logic);
    const { id } = await engine.start({ logicId: logic.logicId, input: {} });
    await settle(engine);
    return { id, record: await engine.get(id) };
  }
  const callsFor = (path: string, id: string) => svc.calls(path).filter((r) => r.headers['x-flow-workflow-id'] === id);

  it('a type error in the next step input fails it permanently and compensates what ran before', async () => {
    const { id, record } = await run(reserveThen({ convert: { kind: 'pass', input: '{ "cents": steps.reserve.amount * 100 }' } }));
    expect(errors).toEqual([]);
    expect(record.state).toBe('compensated');
    expect(record.error).toMatchObject({ code: 'FLOW_EXPR_FAILED', step: 'convert', field: 'input' });
    expect(record.error?.message).toMatch(/convert.*input.*\*/s);
    expect(callsFor('/reserve', id)).toHaveLength(1);
    expect(callsFor('/release', id)).toHaveLength(1);
    expect(record.steps.map((s) => [s.step, s.kind, s.state, s.error?.code ?? null])).toEqual([
      ['reserve', 'step', 'succeeded', null],
      ['convert', 'step', 'failed', 'FLOW_EXPR_FAILED'],
      ['reserve', 'compensation', 'succeeded', null],
    ]);
  });

  it('takes onError when the step has one', async () => {
    const { record } = await run(
      reserveThen({
        convert: { kind: 'pass', input: '{ "n": $number("x") }', onError: 'recover' },
        recover: { kind: 'pass', input: '{ "code": steps.convert.error.code, "field": steps.convert.error.field }' },
      }),
    );
    expect(errors).toEqual([]);
    expect(record.state).toBe('completed');
    expect(record.output).toEqual({ code: 'FLOW_EXPR_FAILED', field: 'input' });
  });

  it('a choice condition, an emit payload and the workflow output name their field', async () => {
    const choice = await run(reserveThen({ convert: { kind: 'choice', branches: [{ when: '$number("x") > 1', next: 'x' }], otherwise: 'x' }, x: { kind: 'pass' } }));
    expect(choice.record.error).toMatchObject({ code: 'FLOW_EXPR_FAILED', step: 'convert', field: 'branches[0].when' });
    const emit = await run(reserveThen({ convert: { kind: 'emit', event: 'e', payload: '"a" + 1' } }));
    expect(emit.record.error).toMatchObject({ code: 'FLOW_EXPR_FAILED', step: 'convert', field: 'payload' });
    const out = await run(
      uniqueLogic({
        start: 'reserve',
        output: '$number("x")',
        steps: { reserve: { kind: 'proxy', path: '/reserve', compensate: { kind: 'proxy', path: '/release' } } },
      }),
    );
    expect(out.record.error).toMatchObject({ code: 'FLOW_EXPR_FAILED', field: 'output' });
    for (const r of [choice, emit, out]) expect(r.record.state).toBe('compensated');
    expect(errors).toEqual([]);
  });

  it('a compensation whose input fails dead-letters the instance instead of looping', async () => {
    const { id, record } = await run(
      uniqueLogic({
        start: 'reserve',
        steps: {
          reserve: { kind: 'proxy', path: '/reserve', compensate: { kind: 'proxy', path: '/release', input: '$number("x")' }, next: 'stop' },
          stop: { kind: 'fail', code: 'STOP' },
        },
      }),
    );
    expect(errors).toEqual([]);
    expect(record.state).toBe('dead_lettered');
    expect(record.error).toMatchObject({ code: 'FLOW_COMPENSATION_FAILED', step: 'reserve' });
    expect(record.compensations).toEqual([expect.objectContaining({ step: 'reserve', state: 'failed', error: expect.objectContaining({ code: 'FLOW_EXPR_FAILED', field: 'compensate.input' }) })]);
    expect(callsFor('/release', id)).toHaveLength(0);
  });

  it('a runaway expression is cut off by the evaluation budget', async () => {
    const recursion = await run(reserveThen({ convert: { kind: 'pass', input: '($f := function($n){ $f($n + 1) }; $f(0))' } }));
    expect(recursion.record.error).toMatchObject({ code: 'FLOW_EXPR_BUDGET_EXCEEDED', step: 'convert', field: 'input' });
    const deep = await run(reserveThen({ convert: { kind: 'pass', input: '($f := function($n){ $n = 0 ? 0 : 1 + $f($n - 1) }; $f(100000))' } }));
    expect(deep.record.error).toMatchObject({ code: 'FLOW_EXPR_BUDGET_EXCEEDED', step: 'convert', field: 'input' });
    expect([recursion.record.state, deep.record.state]).toEqual(['compensated', 'compensated']);
    expect(errors).toEqual([]);
  });
});
