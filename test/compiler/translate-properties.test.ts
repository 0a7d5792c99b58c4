import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { asJson, evaluate, toFunction, toJsonata } from './translate-helpers.ts';

/** The context every property case is written against. */
const CTX = `{
  input: {
    a: number; b: number; i: number; j: number; s: string; t: string; flag: boolean; other: boolean;
    opt?: string; opt2?: string; maybe?: { k: number }; list: number[]; words: string[];
    items: { name: string; price: number; qty: number }[]; nested: { x: number; y?: number }; grid: number[][];
  };
  steps: { reserve: { id: string; cents: number } };
}`;

const double = fc.double({ noNaN: true, noDefaultInfinity: true, min: -1e9, max: 1e9 });
const text = fc.string({ unit: 'binary', maxLength: 8 });
const word = fc.constantFrom('', 'a', 'b', 'x', 'hello', 'ß', '😀');
const ctxArb = fc.record({
  input: fc.record(
    {
      a: double,
      b: double,
      i: fc.integer({ min: -1000, max: 1000 }),
      j: fc.integer({ min: -1000, max: 1000 }),
      s: fc.oneof(text, word),
      t: fc.oneof(text, word),
      flag: fc.boolean(),
      other: fc.boolean(),
      opt: fc.oneof(word, text),
      opt2: word,
      maybe: fc.record({ k: fc.integer() }),
      list: fc.array(fc.integer({ min: -50, max: 50 }), { maxLength: 5 }),
      words: fc.array(word, { maxLength: 4 }),
      items: fc.array(fc.record({ name: word, price: double, qty: fc.integer({ min: -2, max: 5 }) }), { maxLength: 4 }),
      nested: fc.record({ x: fc.integer(), y: fc.integer() }, { requiredKeys: ['x'] }),
      grid: fc.array(fc.array(fc.integer({ min: 0, max: 9 }), { maxLength: 3 }), { maxLength: 3 }),
    },
    { requiredKeys: ['a', 'b', 'i', 'j', 's', 't', 'flag', 'other', 'list', 'words', 'items', 'nested', 'grid'] },
  ),
  steps: fc.record({ reserve: fc.record({ id: word, cents: fc.integer() }) }),
});

/** Mappings whose TypeScript and JSONata forms must agree on every input (sources, not templates). */
const CASES: Record<string, string> = {
  arithmetic: '({ input }) => input.a * 100 + input.b - input.a / 7',
  'remainder and negation': '({ input }) => -(input.i % 7) + input.j',
  power: '({ input }) => input.i ** 2',
  comparisons: '({ input }) => ({ gt: input.a > input.b, le: input.i <= input.j, eq: input.i === input.j, ne: input.s !== input.t })',
  'boolean logic': '({ input }) => (input.flag && !input.other) || input.a > 0',
  ternary: "({ input }) => (input.a >= 0 ? 'non-negative' : 'negative')",
  'ternary with undefined branch drops the field': "({ input }) => ({ v: input.flag ? input.s : undefined, w: input.flag ? undefined : 1 })",
  // biome-ignore lint/suspicious/noTemplateCurlyInString: TypeScript source text
  'template literal': '({ input }) => `${input.s}-${input.i}:${input.flag}/${input.t}`',
  'string concatenation': "({ input }) => input.s + input.t + '!' + input.j",
  'string and array length': '({ input }) => input.s.length * 10 + input.list.length',
  'map and filter': '({ input }) => input.items.filter((it) => it.qty > 0).map((it) => ({ name: it.name, total: it.price * it.qty }))',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: TypeScript source text
  'map with index and destructuring': '({ input }) => input.items.map(({ name }, n) => `${n}:${name}`)',
  'filter by truthiness': '({ input }) => input.list.filter((n) => n % 2)',
  'object spread': '({ input, steps }) => ({ ...input.nested, ...steps.reserve, z: input.i })',
  'array literal keeps nested arrays': '({ input }) => [input.list, [input.i], ...input.list, input.words.length]',
  'array literal of computed arrays': '({ input }) => [input.flag ? input.list : [input.i], input.words.map((w) => w), [], [[input.j]]]',
  'map returning arrays': '({ input }) => ({ pairs: input.words.map((w) => [w, w]), lists: input.items.map(() => input.list) })',
  'map over arrays of arrays with index': '({ input }) => input.grid.map((row, r) => [r, row.length, ...row])',
  'filter over arrays of arrays': '({ input }) => input.grid.filter((row) => row.length > 1)',
  'array literal holding mapped arrays': '({ input }) => [input.grid.map((row) => row), input.words.map((w) => w.length), 3]',
  'nullish default': "({ input }) => input.opt ?? 'none'",
  'or default treats empty string as missing': "({ input }) => input.opt || 'default'",
  'and returns an operand': '({ input }) => input.opt && input.i',
  'object truthiness': '({ input }) => (input.maybe ? input.maybe.k : -1)',
  'negated optional': '({ input }) => !input.opt',
  'undefined checks': '({ input }) => ({ has: input.opt !== undefined, missing: input.nested.y === undefined })',
  'equality with optional sides': '({ input }) => ({ eq: input.opt === input.opt2, ne: input.opt !== input.opt2, y: input.nested.y === input.i })',
  'loose null check': '({ input }) => input.maybe == null',
  'math helpers': '({ input }) => [Math.round(input.a * 100) / 100, Math.floor(input.b), Math.ceil(input.a), Math.abs(input.b), Math.max(input.i, input.j, 3), Math.min(input.a, input.b)]',
  'rounding halves like JavaScript': '({ input }) => Math.round(input.i + 0.5) + Math.round(input.j - 0.5)',
  'string helpers': '({ input }) => [input.s.toUpperCase(), input.t.toLowerCase(), input.s.includes(input.t), input.words.includes(input.s), input.words.join("/"), input.words.join()]',
  'String() of integers': '({ input }) => String(input.i) + String(input.flag)',
  'whole context parameter': '(ctx) => ({ id: ctx.steps.reserve.id, n: ctx.input.list.length })',
  'nested destructuring': '({ steps: { reserve }, input: { nested } }) => reserve.cents + nested.x',
  'block body with a single return': '({ input }) => { return input.i + 1; }',
};

describe('TypeScript mappings and their JSONata translations agree', () => {
  for (const [name, src] of Object.entries(CASES)) {
    test(`${name}: same result for every generated input`, async () => {
      const expr = toJsonata(CTX, src);
      const fn = toFunction(src);
      await fc.assert(
        fc.asyncProperty(ctxArb, async (ctx) => {
          expect(await evaluate(expr, ctx)).toEqual(asJson(fn(ctx)));
        }),
        { numRuns: 150 },
      );
    });
  }
});
