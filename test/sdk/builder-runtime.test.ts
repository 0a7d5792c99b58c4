import { describe, expect, test } from 'vitest';
import { z } from 'zod';
import { FlowSdkError, isWorkflow, SdkErrorCode, workflow } from '../../sdk/index.ts';

const base = workflow({ logicId: 'sdk.flow', version: 2, domain: 'sdk', input: z.object({ n: z.number() }) });

function sdkCode(fn: () => unknown): string | undefined {
  try {
    fn();
    return undefined;
  } catch (err) {
    expect(err).toBeInstanceOf(FlowSdkError);
    return (err as FlowSdkError).code;
  }
}

describe('workflow builder', () => {
  test('every call returns a new builder and leaves the old one unchanged', () => {
    const one = base.proxy('a', { path: '/a' });
    const two = one.proxy('b', { path: '/b' });
    expect(one.definition().steps.map((s) => s.name)).toEqual(['a']);
    expect(two.definition().steps.map((s) => s.name)).toEqual(['a', 'b']);
    expect(Object.isFrozen(two)).toBe(true);
  });

  test('a step continues to the step declared after it, and the last one ends', () => {
    const d = base.proxy('a', { path: '/a' }).pass('b').definition();
    expect(d.start).toBe('a');
    expect(d.steps[0]?.step['next']).toBe('b');
    expect(d.steps[1]?.step['next']).toBeUndefined();
  });

  test('next: null ends the workflow, and choice and fail steps never continue', () => {
    const d = base
      .choice('c', { branches: [{ when: () => true, next: 'a' }], otherwise: 'f' })
      .proxy('a', { path: '/a', next: null })
      .fail('f', { code: 'NOPE' })
      .definition();
    expect(d.steps.map((s) => s.step['next'])).toEqual([undefined, undefined, undefined]);
  });

  test('the input, step output and decision schemas become JSON Schema 2020-12', () => {
    const d = base
      .proxy('a', { path: '/a', output: z.object({ id: z.string() }) })
      .decision('d', { options: ['yes', 'no'], schema: z.object({ note: z.string().optional() }) })
      .definition();
    expect(d.input).toMatchObject({ $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'object', required: ['n'] });
    expect(d.steps[0]?.step['output']).toMatchObject({ type: 'object', required: ['id'] });
    expect(d.steps[1]?.step['schema']).toMatchObject({ type: 'object', properties: { note: { type: 'string' } } });
  });

  test('a waitFor step carries its message, its payload schema as JSON Schema, and its timeout', () => {
    const d = base
      .waitFor('settled', { message: 'funds.settled', schema: z.object({ amount: z.number() }), timeout: 'P2D', onError: 'late' })
      .pass('late', { next: null })
      .definition();
    expect(d.steps[0]?.step).toMatchObject({
      kind: 'waitFor',
      message: 'funds.settled',
      schema: { type: 'object', properties: { amount: { type: 'number' } }, required: ['amount'] },
      timeout: 'P2D',
      onError: 'late',
      next: 'late',
    });
  });

  test('a children step declares one child output and gets an array schema, fail_fast by default', () => {
    const d = base
      .children('kids', { logicId: 'sdk.child', items: () => [1], itemInput: ({ item }) => item, output: z.object({ ok: z.boolean() }) })
      .definition();
    expect(d.steps[0]?.step).toMatchObject({ failurePolicy: 'fail_fast', output: { type: 'array', items: { type: 'object' } } });
  });

  test('a duplicate step name is refused at run time too', () => {
    const add = base.proxy('a', { path: '/a' }) as unknown as { proxy(n: string, o: object): unknown };
    expect(sdkCode(() => add.proxy('a', { path: '/b' }))).toBe(SdkErrorCode.duplicateStep);
  });

  test('routes to unknown steps and undeclared modules are refused', () => {
    expect(sdkCode(() => base.proxy('a', { path: '/a', next: 'nowhere' }).definition())).toBe(SdkErrorCode.unknownStep);
    const loose = base as unknown as { func(n: string, o: object): { definition(): unknown } };
    expect(sdkCode(() => loose.func('f', { module: 'ghost' }).definition())).toBe(SdkErrorCode.unknownModule);
  });

  test('falling through into a fail step by accident is refused', () => {
    expect(sdkCode(() => base.proxy('a', { path: '/a' }).fail('f', { code: 'X' }).definition())).toBe(SdkErrorCode.fallthroughIntoFail);
    expect(sdkCode(() => base.proxy('a', { path: '/a', next: 'f' }).fail('f', { code: 'X' }).definition())).toBeUndefined();
  });

  test('invalid names, versions and literal urls are refused', () => {
    expect(sdkCode(() => workflow({ logicId: 'Bad Id', version: 1, domain: 'd', input: z.object({}) }))).toBe(SdkErrorCode.invalidName);
    expect(sdkCode(() => workflow({ logicId: 'ok', version: 0, domain: 'd', input: z.object({}) }))).toBe(SdkErrorCode.invalidOption);
    expect(sdkCode(() => base.http('h', { method: 'GET', url: 'ftp://x' }).definition())).toBe(SdkErrorCode.invalidOption);
    expect(sdkCode(() => workflow({ logicId: 'ok', version: 1, domain: 'd', input: z.object({}) }).definition())).toBe(SdkErrorCode.noSteps);
  });

  test('a schema with no JSON Schema form is reported with the SDK code', () => {
    const dated = workflow({ logicId: 'ok', version: 1, domain: 'd', input: z.object({ at: z.date() }) }).pass('p');
    expect(sdkCode(() => dated.definition())).toBe(SdkErrorCode.schemaUnrepresentable);
  });

  test('a message trigger names a message a waitFor step waits for, and a match with its mapping', () => {
    const waits = base.waitFor('settled', { message: 'funds.settled' });
    const byPayment = { correlationId: ({ event }: { event: { idempotencyKey: string } }) => event.idempotencyKey };
    expect(sdkCode(() => waits.trigger('ledger.settled', { message: 'funds.settled', match: byPayment }).definition())).toBeUndefined();
    expect(sdkCode(() => waits.trigger('ledger.settled', { message: 'funds.refunded', match: byPayment }).definition())).toBe(SdkErrorCode.invalidOption);
    expect(sdkCode(() => waits.trigger('ledger.settled', { message: 'funds.settled', match: { attribute: 'order' } as never }).definition())).toBe(
      SdkErrorCode.invalidOption,
    );
  });

  test('modules, triggers and output are carried into the definition', () => {
    const d = base
      .module('scoring', { wasm: './scoring.wasm', imports: { balance: { path: '/balance' } } })
      .trigger('thing.happened', { input: ({ event }) => ({ n: event.type.length }) })
      .func('score', { module: 'scoring' })
      .output(({ steps }) => steps.score)
      .definition();
    expect(d.modules).toEqual([{ name: 'scoring', source: { kind: 'wasm', path: './scoring.wasm' }, imports: { balance: { path: '/balance' } } }]);
    expect(d.triggers.map((t) => t.event)).toEqual(['thing.happened']);
    expect(typeof d.output).toBe('function');
    expect(isWorkflow(base)).toBe(true);
    expect(isWorkflow({})).toBe(false);
  });
});
