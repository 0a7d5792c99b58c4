import { describe, expect, test } from 'vitest';
import { CompileErrorCode } from '../../compiler/errors.ts';
import { positionOf, translationError } from './translate-helpers.ts';

const CTX = `{
  input: { a: number; i: number; j: number; s: string; opt?: string; list: number[]; nested: { x: number } };
  steps: Record<string, unknown>;
}`;

/** [construct, mapping source, expected code, the text the error must point at]. */
const CASES: [string, string, string, string][] = [
  ['a closure over an outer variable', '({ input }) => input.a * RATE', CompileErrorCode.exprClosure, 'RATE'],
  ['a call to an unsupported method', "({ input }) => input.s.padStart(3, '0')", CompileErrorCode.exprCall, 'input.s.padStart'],
  ['a call to a plain function', '({ input }) => parseInt(input.s)', CompileErrorCode.exprCall, 'parseInt('],
  ['Date.now()', '({ input }) => input.a + Date.now()', CompileErrorCode.exprNondeterministic, 'Date.now()'],
  ['new Date()', '() => new Date()', CompileErrorCode.exprNondeterministic, 'new Date()'],
  ['Math.random()', '({ input }) => input.a * Math.random()', CompileErrorCode.exprNondeterministic, 'Math.random()'],
  ['a for loop', '({ input }) => { for (const x of input.list) { void x; } return 1; }', CompileErrorCode.exprLoop, 'for ('],
  ['a while loop', '({ input }) => { while (input.a > 0) {} return 1; }', CompileErrorCode.exprLoop, 'while'],
  ['a local variable', '({ input }) => { const x = input.a; return x; }', CompileErrorCode.exprStatement, 'const x'],
  ['an assignment', '({ input }) => (input.a = 1)', CompileErrorCode.exprAssignment, 'input.a = 1'],
  ['an increment', '({ input }) => input.i++', CompileErrorCode.exprAssignment, 'input.i++'],
  ['a bitwise operator', '({ input }) => input.i & 1', CompileErrorCode.exprOperator, '& 1'],
  ['typeof', '({ input }) => typeof input.s', CompileErrorCode.exprOperator, 'typeof'],
  ['an index into an array', '({ input }) => input.list[0]', CompileErrorCode.exprComputedAccess, 'input.list[0]'],
  ['a computed key', '({ input }) => ({ [input.s]: 1 })', CompileErrorCode.exprComputedKey, '[input.s]'],
  ['a rest element in the parameter', '({ input, ...rest }) => rest', CompileErrorCode.exprParameter, '...rest'],
  ['a default value in the parameter', '({ input = { a: 1 } as never }) => input', CompileErrorCode.exprParameter, 'input = '],
  ['a second parameter', '(ctx, extra) => ctx', CompileErrorCode.exprParameter, 'extra'],
  ['a nested function value', '({ input }) => ({ f: () => input.a })', CompileErrorCode.exprFunction, '() => input.a'],
  ['an object method', '({ input }) => ({ f() { return input.a; } })', CompileErrorCode.exprFunction, 'f()'],
  ['new', '() => new Map()', CompileErrorCode.exprNew, 'new Map()'],
  ['an async mapping', 'async ({ input }) => input.a', CompileErrorCode.exprAsync, 'async'],
  ['a regular expression', '() => /a+/', CompileErrorCode.exprRegex, '/a+/'],
  ['this', '() => this', CompileErrorCode.exprThis, 'this'],
  ['a bare undefined', '() => undefined', CompileErrorCode.exprUndefined, 'undefined'],
  ['object identity equality', '({ input }) => input.nested === input.nested', CompileErrorCode.exprEquality, 'input.nested ==='],
  ['loose equality', '({ input }) => input.i == input.j', CompileErrorCode.exprEquality, 'input.i =='],
  ['text from a maybe-undefined value', "({ input }) => input.opt + '!'", CompileErrorCode.exprType, 'input.opt +'],
  ['.length of an unknown value', '({ steps }) => (steps.x as { length: number }).length + 1', CompileErrorCode.exprType, '(steps.x'],
  ['an unsupported literal', '() => 10n', CompileErrorCode.exprUnsupported, '10n'],
  ['a context field that does not exist', '({ input, output }) => input', CompileErrorCode.exprParameter, 'output'],
];

describe('each unsupported construct fails with its own code at its exact position', () => {
  for (const [construct, src, code, marker] of CASES) {
    test(`${construct} → ${code}`, () => {
      const diagnostic = translationError(CTX, src);
      expect(diagnostic).not.toBeNull();
      expect(diagnostic?.code).toBe(code);
      expect({ line: diagnostic?.line, column: diagnostic?.column }).toEqual(positionOf(CTX, src, marker));
      expect(diagnostic?.hint).toBeTruthy();
    });
  }

  test('the closure hint says to move computation into a func step', () => {
    expect(translationError(CTX, '({ input }) => input.a * RATE')?.hint).toMatch(/func step/);
  });
});
