import { describe, expect, it } from 'vitest';
import { evaluateIn } from '../../engine/core/expressions.ts';
import { replay, TestRunner } from '../../engine/testing/index.ts';
import { makeLogic } from '../contracts/helpers.ts';

/**
 * An expression's budget counts work, not nodes alone: a range, a padded string or a sequence
 * built in one node is charged by its size, and refused before it is built when it is larger
 * than any value the engine stores. The budget is counts, never time, so a replay meets it at
 * the same point; and a long evaluation lets the event loop run between its nodes.
 */

/** The code and message an evaluation fails with. */
async function failure(expr: string, context: Record<string, unknown> = {}): Promise<{ code: string; message: string }> {
  return evaluateIn('input', expr, context as never).then(
    (v) => ({ code: 'none', message: String(JSON.stringify(v)).slice(0, 80) }),
    (err: { code: string; message: string }) => ({ code: err.code, message: err.message }),
  );
}

const HOSTILE = {
  'ranges of ten million, ten times over': '$sum($map([1..10], function($i){ $count([1..10000000]) }))',
  'a string padded to 1e8 characters': '$pad("", 1e8, "x")',
  'a string padded to the left through an alias': '($p := $pad; $p("", -100000000, "x"))',
  'a million-item range counted again and again': '$sum($map([1..1000], function($i){ $count([1..900000]) }))',
  'a string doubled without end': '($d := function($s, $n){ $n = 0 ? $s : $d($s & $s, $n - 1) }; $length($d("x", 40)))',
};

describe('the expression budget counts real work', () => {
  it.each(Object.entries(HOSTILE))('%s fails FLOW_EXPR_BUDGET_EXCEEDED, the same way every time', async (_, expr) => {
    const first = await failure(expr);
    expect(first.code, first.message).toBe('FLOW_EXPR_BUDGET_EXCEEDED');
    expect(await failure(expr)).toEqual(first);
  });

  it('work within the budget still evaluates: a map over 60,000 items, a range of 100,000, a pad of 10,000', async () => {
    const items = Array.from({ length: 60_000 }, (_, i) => ({ n: i }));
    expect(await evaluateIn('input', '$count([$map(input.items, function($x){ $x.n * 2 })])', { input: { items } })).toBe(60_000);
    expect(await evaluateIn('input', '$sum([1..100000])', {})).toBe(5_000_050_000);
    expect(await evaluateIn('input', '$length($pad("", 10000, "ab"))', {})).toBe(10_000);
  });

  it('a runaway evaluation lets the event loop run while it counts towards its budget', async () => {
    let turns = 0;
    const tick = () => {
      turns++;
      if (turns < 1_000) setImmediate(tick);
    };
    setImmediate(tick);
    const loop = await failure('$sum($map([1..400000], function($i){ $i * 2 }))');
    expect(loop.code).toBe('FLOW_EXPR_BUDGET_EXCEEDED');
    expect(turns).toBeGreaterThan(1);
  });

  it('a step whose mapping goes past the budget fails it permanently, and replay meets the same failure', async () => {
    const logic = makeLogic({
      start: 'spin',
      steps: { spin: { kind: 'pass', input: HOSTILE['ranges of ten million, ten times over'] } },
    });
    const flow = await new TestRunner(logic, {}).start({});
    expect(flow.instance.state).toBe('failed');
    expect(flow.instance.error).toMatchObject({ code: 'FLOW_EXPR_BUDGET_EXCEEDED', step: 'spin' });
    expect(await replay(logic, flow.trace)).toEqual(flow.instance);
  });
});
