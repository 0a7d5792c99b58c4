import fc from 'fast-check';
import { expect, it } from 'vitest';
import { type LogicVersion, type StepDef, TERMINAL_STATES } from '../../contracts/index.ts';
import type { Fake } from '../../engine/testing/index.ts';
import { replay, TestRunner } from '../../engine/testing/index.ts';
import { makeLogic } from '../contracts/helpers.ts';

/**
 * Throws injected at random points of the core — a mapping that fails at run time in a step's
 * input, an emit payload, a choice condition, a compensation's input or the workflow output, on
 * random paths with random call outcomes — always end the instance in a recorded state: the run
 * never throws, nothing is left running, every expression failure is a recorded step error with
 * its location, and replaying the trace gives the same instance.
 */

type Kind = 'proxy' | 'pass' | 'emit' | 'choice';
type Where = 'input' | 'payload' | 'when' | 'compensate' | null;
interface Shape {
  kind: Kind;
  bad: Where;
  throws: string;
  compensate: boolean;
  onError: number | null;
}

/** Mappings that throw at run time (or fail to parse, which is found at run time too). */
const THROWING = ['$number("x")', '"a" + 1', '$error("boom")', '{ "a": ', 'input.list.$undefined()', '$sum("text")'];

const shapes = fc.array(
  fc.record({
    kind: fc.constantFrom<Kind>('proxy', 'proxy', 'pass', 'emit', 'choice'),
    bad: fc.constantFrom<Where>(null, null, 'input', 'payload', 'when', 'compensate'),
    throws: fc.constantFrom(...THROWING),
    compensate: fc.boolean(),
    onError: fc.option(fc.integer({ min: 1, max: 3 }), { nil: null }),
  }),
  { minLength: 1, maxLength: 6 },
);

function logicOf(list: Shape[], badOutput: string | null): LogicVersion {
  const name = (i: number) => (i < list.length ? `s${i}` : null);
  const steps: Record<string, StepDef> = {};
  list.forEach((s, i) => {
    const next = name(i + 1);
    const onErrorTo = s.onError === null ? null : name(i + s.onError);
    const common = { ...(next === null ? {} : { next }), ...(onErrorTo === null ? {} : { onError: onErrorTo }) };
    const input = s.bad === 'input' ? s.throws : `{ "i": ${i} }`;
    if (s.kind === 'pass') steps[`s${i}`] = { kind: 'pass', input, ...common };
    else if (s.kind === 'emit') steps[`s${i}`] = { kind: 'emit', event: `e${i}`, payload: s.bad === 'payload' ? s.throws : `{ "i": ${i} }`, ...common };
    else if (s.kind === 'choice') {
      const when = s.bad === 'when' ? s.throws : `input.n % ${i + 2} = 0`;
      const target = name(i + 2) ?? next ?? `s${i}`;
      steps[`s${i}`] = target === `s${i}`
        ? { kind: 'pass', input, ...common }
        : { kind: 'choice', branches: [{ when, next: target }], otherwise: next ?? target, ...(onErrorTo === null ? {} : { onError: onErrorTo }) };
    } else {
      const undo = s.bad === 'compensate' ? s.throws : `{ "undo": ${i} }`;
      steps[`s${i}`] = {
        kind: 'proxy',
        path: `/s${i}`,
        input,
        retry: { maxAttempts: 2, initialMs: 100 },
        ...(s.compensate || s.bad === 'compensate' ? { compensate: { kind: 'proxy' as const, path: `/undo${i}`, input: undo } } : {}),
        ...common,
      };
    }
  });
  return makeLogic({ logicId: 'prop.expr', start: 's0', steps, ...(badOutput === null ? {} : { output: badOutput }) });
}

const EXPR_CODES = new Set(['FLOW_EXPR_FAILED', 'FLOW_EXPR_BUDGET_EXCEEDED']);

it('a throw at any point of the core ends the instance in a recorded state, never an escaped error', async () => {
  await fc.assert(
    fc.asyncProperty(
      shapes,
      fc.option(fc.constantFrom(...THROWING), { nil: null }),
      fc.array(fc.constantFrom<'ok' | 'transient' | 'permanent'>('ok', 'ok', 'ok', 'transient', 'permanent'), { maxLength: 30 }),
      fc.integer({ min: 0, max: 100 }),
      async (list, badOutput, schedule, n) => {
        const logic = logicOf(list, badOutput);
        let k = 0;
        const fake: Fake = () => {
          const o = schedule[k++] ?? 'ok';
          if (o === 'ok') return { status: 'succeeded', output: { ok: true } };
          return { status: 'failed', retryable: o === 'transient', error: { code: o === 'transient' ? 'HTTP_503' : 'HTTP_422', message: o } };
        };
        const fakes = Object.fromEntries(list.flatMap((_, i) => [[`test/s${i}`, fake], [`test/undo${i}`, fake]]));
        const { instance, trace } = await new TestRunner(logic, fakes).run({ n, list: [1, 2] }, { id: 'wf' });

        expect(TERMINAL_STATES.has(instance.state)).toBe(true);
        expect(instance.ctx.running).toBeNull();
        const written = trace.entries.flatMap((e) => e.decision?.attempts ?? []);
        const failedExpr = written.filter((a) => a.error !== null && EXPR_CODES.has(a.error.code));
        for (const a of failedExpr) expect(a.error).toMatchObject({ field: expect.any(String), step: expect.any(String) });
        if (instance.error !== null && EXPR_CODES.has(instance.error.code)) expect(instance.error.field).toEqual(expect.any(String));
        expect(await replay(logic, trace)).toEqual(instance);
      },
    ),
    { numRuns: 300 },
  );
});
