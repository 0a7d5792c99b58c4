import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { evaluate } from '../../engine/core/expressions.ts';
import { onOutcome } from '../../engine/core/flow.ts';
import { initialCtx, type Instance, type JsonValue } from '../../engine/core/instance.ts';
import { makeLogic } from '../contracts/helpers.ts';

// A Draft copies the map of outputs, not each output (engine/core/transition.ts): a transition
// shares the outputs of the instance it started from. That is sound only while nothing in the
// core — JSONata included — changes an output in place.

const OUTPUT: JsonValue = {
  items: [3, 1, 2],
  objs: [
    { k: 'a', v: 1 },
    { k: 'b', v: 2 },
  ],
  nested: { deep: { list: [[1, 2], [3]] } },
  one: [7],
};

/** Every own key (array extras such as JSONata's `sequence` flag too) and every value, recursively. */
function shape(v: unknown): unknown {
  if (v === null || typeof v !== 'object') return v;
  return Object.fromEntries(Reflect.ownKeys(v).map((k) => [String(k), shape((v as Record<string | symbol, unknown>)[k])]));
}

function instanceWith(outputs: Record<string, JsonValue>): Instance {
  return {
    id: randomUUID(),
    env: 'test',
    domain: 'test',
    logicId: 'core.outputs',
    version: 1,
    logicHash: 'sha256:x',
    state: 'processing',
    input: {},
    output: null,
    currentStep: null,
    error: null,
    generation: 0,
    correlationId: null,
    parentId: null,
    parentSeq: null,
    branchIndex: null,
    ctx: { ...initialCtx(), outputs, order: Object.keys(outputs) },
  };
}

describe('step outputs are never changed in place', () => {
  const expressions = [
    'steps.s0',
    'steps.s0.items',
    'steps.s0.items[]',
    'steps.s0.one',
    'steps.s0.one[]',
    'steps.s0.items[0]',
    '$sort(steps.s0.items)',
    '$reverse(steps.s0.items)',
    '$append(steps.s0.items, 4)',
    '$append(steps.s0.one, steps.s0.items)',
    '$merge([steps.s0, { "added": true }])',
    '$map(steps.s0.items, function($v) { $v * 2 })',
    '$filter(steps.s0.objs, function($o) { $o.v > 1 })',
    'steps.s0.objs{ k: v }',
    'steps.s0.objs^(>v)',
    'steps.s0.objs#$i[$i > 0].k',
    'steps.s0.objs.{ "key": k }',
    'steps.s0.nested.deep.list',
    '$spread(steps.s0)',
    '$each(steps.s0, function($v, $k) { $k })',
    '$sift(steps.s0, function($v) { $exists($v) })',
    '$keys(steps)',
    'steps.s0 ~> | objs | { "v": 0 } |',
    '[steps.s0.items, steps.s0.one]',
    '$zip(steps.s0.items, steps.s0.items)',
  ];

  it.each(expressions)('evaluating %s leaves the outputs it reads as they were', async (expr) => {
    const inst = instanceWith({ s0: structuredClone(OUTPUT) });
    const before = shape(inst.ctx.outputs);
    await evaluate('input', expr, inst);
    expect(shape(inst.ctx.outputs)).toEqual(before);
  });

  it('a transition leaves the instance it started from as it was, and shares the outputs it did not set', async () => {
    const logic = makeLogic({
      logicId: 'core.outputs',
      start: 's0',
      steps: {
        s0: { kind: 'proxy', path: '/a', next: 's1' },
        s1: { kind: 'proxy', path: '/b', input: '{ "n": $count(steps.s0.items), "s": $sort(steps.s0.items) }' },
      },
    });
    const inst = { ...instanceWith({ s0: structuredClone(OUTPUT) }), currentStep: 's0' };
    inst.ctx.running = { seq: 0, kind: 'step', step: 's0', attempt: 1, generation: 0, input: {}, idempotencyKey: 'k', budgetStart: 1 };
    inst.ctx.seq = 1;
    inst.ctx.order = [];
    inst.ctx.outputs = {};
    const first = await onOutcome(logic, inst, { status: 'succeeded', output: structuredClone(OUTPUT) }, true);
    const snapshot = shape(first.instance);
    const second = await onOutcome(logic, first.instance, { status: 'succeeded', output: { done: true } }, true);
    expect(shape(first.instance)).toEqual(snapshot);
    expect(second.instance.ctx.outputs['s0']).toBe(first.instance.ctx.outputs['s0']);
    expect(second.instance.ctx.outputs['s1']).toEqual({ done: true });
    expect(first.instance.ctx.outputs).not.toHaveProperty('s1');
  });
});
