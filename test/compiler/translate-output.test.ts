import { describe, expect, test } from 'vitest';
import { TRIGGER_ROOTS } from '../../compiler/translate/index.ts';
import { toJsonata } from './translate-helpers.ts';

const CTX = '{ input: { amount: number; s: string; list: number[]; opt?: string }; steps: { reserve: { reservationId: string } } }';

describe('mappings translate to the JSONata the notes prescribe', () => {
  test('context fields become bare paths, and object literals object constructors', () => {
    expect(toJsonata(CTX, '({ input, steps }) => ({ id: steps.reserve.reservationId, cents: input.amount * 100 })')).toBe(
      '{"id": steps.reserve.reservationId, "cents": input.amount * 100}',
    );
  });

  test('a whole-context parameter reads the same paths', () => {
    expect(toJsonata(CTX, '(ctx) => ctx.input.amount')).toBe('input.amount');
  });

  test('strings concatenate with & and compare with =', () => {
    expect(toJsonata(CTX, "({ input }) => input.s + '!'")).toBe('input.s & "!"');
    expect(toJsonata(CTX, "({ input }) => input.s === 'x'")).toBe('input.s = "x"');
  });

  test('.length picks $count for arrays and counts UTF-16 units for strings', () => {
    expect(toJsonata(CTX, '({ input }) => input.list.length')).toBe('$count(input.list)');
    expect(toJsonata(CTX, '({ input }) => input.s.length')).toBe('$count($split(input.s, ""))');
  });

  test('.map is wrapped in an array constructor', () => {
    expect(toJsonata(CTX, '({ input }) => input.list.map((n) => n * 2)')).toBe('[$map(input.list, function($n) { $n * 2 })]');
  });

  test('a field set to undefined is left out', () => {
    expect(toJsonata(CTX, '({ input }) => ({ a: undefined, b: input.opt })')).toBe('{"b": input.opt}');
  });

  test('boolean operators become and/or', () => {
    expect(toJsonata(CTX, '({ input }) => input.amount > 1 && input.amount < 9')).toBe('(input.amount > 1) and (input.amount < 9)');
  });

  test('field names that are not identifiers are quoted with backticks', () => {
    expect(toJsonata('{ steps: { "my-step": { "a b": number } } }', "({ steps }) => steps['my-step']['a b']")).toBe(
      'steps.`my-step`.`a b`',
    );
  });

  test('a trigger mapping reads the event', () => {
    expect(toJsonata('{ event: { payload: { accountId: string } } }', '({ event }) => ({ id: event.payload.accountId })', TRIGGER_ROOTS)).toBe(
      '{"id": event.payload.accountId}',
    );
  });
});
