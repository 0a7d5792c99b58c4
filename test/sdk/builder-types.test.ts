import { describe, expect, expectTypeOf, test } from 'vitest';
import { z } from 'zod';
import {
  type DecisionResult,
  type WorkflowInput,
  type WorkflowOutput,
  type WorkflowSteps,
  workflow,
} from '../../sdk/index.ts';

const base = workflow({
  logicId: 'types.flow',
  version: 1,
  domain: 'types',
  input: z.object({ amount: z.number(), email: z.string().optional(), tags: z.array(z.string()) }),
});

describe('builder type inference', () => {
  test('the workflow input type comes from the zod schema', () => {
    base.proxy('a', {
      path: '/a',
      input: ({ input }) => {
        expectTypeOf(input).toEqualTypeOf<{ amount: number; email?: string | undefined; tags: string[] }>();
        return input.amount;
      },
    });
  });

  test('attribute mappings see the input at the start, and a step its own output', () => {
    workflow({
      logicId: 'types.attrs',
      version: 1,
      domain: 'types',
      input: z.object({ accountId: z.string(), amount: z.number() }),
      attributes: {
        accountId: ({ input }) => input.accountId,
        amount: { type: 'number', value: ({ input }) => input.amount },
        // @ts-expect-error an attribute is a string, a number or a time, not an object
        whole: ({ input }) => input,
      },
      sla: { within: 'PT2H' },
    }).proxy('settle', {
      path: '/s',
      output: z.object({ at: z.string() }),
      sla: { within: 'PT10M' },
      attributes: {
        settledAt: ({ output }) => {
          expectTypeOf(output.at).toEqualTypeOf<string>();
          return output.at;
        },
        // @ts-expect-error the output has no field "when"
        late: ({ output }) => output.when,
      },
    });
  });

  test('later steps see earlier step outputs typed by their output schema', () => {
    base
      .proxy('reserve', { path: '/r', output: z.object({ reservationId: z.string() }) })
      .proxy('capture', {
        path: '/c',
        input: ({ steps }) => {
          expectTypeOf(steps.reserve.reservationId).toEqualTypeOf<string>();
          // @ts-expect-error a typo in a step name is a type error
          return steps.reserv.reservationId;
        },
      });
  });

  test('a step without an output schema has unknown output', () => {
    base.proxy('a', { path: '/a' }).pass('b', {
      input: ({ steps }) => {
        expectTypeOf(steps.a).toEqualTypeOf<unknown>();
        return 1;
      },
    });
  });

  test('a step name cannot be declared twice', () => {
    const one = base.proxy('a', { path: '/a' });
    // @ts-expect-error "a" is already a step
    expect(() => one.proxy('a', { path: '/b' })).toThrow(/declared twice/);
  });

  test("a schedule's input is typed by the workflow input, its overlap by the rules", () => {
    base.schedule('0 6 1 * *', { input: { amount: 1, tags: [] }, overlap: 'buffer_one' });
    // @ts-expect-error amount is a number
    expect(() => base.schedule('0 6 1 * *', { input: { amount: 'one', tags: [] } })).toThrow(/input schema/);
    // @ts-expect-error not an overlap rule
    expect(() => base.schedule('0 6 1 * *', { input: { amount: 1, tags: [] }, overlap: 'queue' })).toThrow(/overlap/);
  });

  test('the step after a decision sees the decision with its options and payload schema', () => {
    base
      .decision('approval', { options: ['approve', 'reject'], schema: z.object({ note: z.string() }) })
      .choice('check', {
        branches: [
          {
            when: ({ decision }) => {
              expectTypeOf(decision).toEqualTypeOf<DecisionResult<'approve' | 'reject', { note: string }>>();
              return decision.option === 'approve';
            },
            next: 'check',
          },
        ],
        otherwise: 'check',
      });
  });

  test("a waitFor step's output is its payload schema's type", () => {
    base.waitFor('settled', { message: 'funds.settled', schema: z.object({ amount: z.number() }) }).proxy('capture', {
      path: '/capture',
      input: ({ steps }) => {
        expectTypeOf(steps.settled).toEqualTypeOf<{ amount: number }>();
        return { amount: steps.settled.amount };
      },
    });
  });

  test('steps other than the one after a decision see decision as undefined', () => {
    base.proxy('a', {
      path: '/a',
      input: ({ decision }) => {
        expectTypeOf(decision).toEqualTypeOf<undefined>();
        return null;
      },
    });
  });

  test('a compensation may find its own step output missing', () => {
    base.proxy('reserve', {
      path: '/r',
      output: z.object({ id: z.string() }),
      compensate: {
        kind: 'proxy',
        path: '/release',
        input: ({ steps }) => {
          expectTypeOf(steps.reserve).toEqualTypeOf<{ id: string } | undefined>();
          return steps.reserve?.id;
        },
      },
    });
  });

  test('children items type the item of itemInput, and the output is an array', () => {
    base
      .children('kids', {
        logicId: 'types.child',
        items: ({ input }) => input.tags,
        itemInput: ({ item, index }) => {
          expectTypeOf(item).toEqualTypeOf<string>();
          expectTypeOf(index).toEqualTypeOf<number>();
          return { item };
        },
        output: z.object({ ok: z.boolean() }),
      })
      .pass('after', {
        input: ({ steps }) => {
          expectTypeOf(steps.kids).toEqualTypeOf<{ ok: boolean }[]>();
          return steps.kids.length;
        },
      });
  });

  test('a pass step outputs what its input mapping returns', () => {
    const w = base.pass('shape', { input: ({ input }) => ({ cents: input.amount * 100 }) });
    expectTypeOf<WorkflowSteps<typeof w>['shape']>().toEqualTypeOf<{ cents: number }>();
  });

  test('func steps accept only declared modules', () => {
    const w = base.module('scoring', { wasm: './scoring.wasm' });
    w.func('score', { module: 'scoring' });
    // @ts-expect-error "other" is not a declared module
    w.func('score', { module: 'other' });
  });

  test('choice predicates must return a boolean', () => {
    base.choice('c', {
      // @ts-expect-error a number is not a predicate
      branches: [{ when: ({ input }) => input.amount, next: 'c' }],
      otherwise: 'c',
    });
  });

  test('a delay takes a duration or an until mapping, not both', () => {
    base.delay('wait', { duration: 'PT1M' });
    base.delay('wait', { until: ({ input }) => input.tags[0] ?? '2030-01-01T00:00:00Z' });
    // @ts-expect-error only one of duration and until
    base.delay('wait', { duration: 'PT1M', until: () => 'x' });
  });

  test('a trigger maps its typed event payload to the workflow input', () => {
    base.trigger('thing.happened', {
      payload: z.object({ value: z.number() }),
      input: ({ event }) => ({ amount: event.payload.value, tags: [] }),
    });
    // @ts-expect-error the mapping must produce the workflow input (no overload takes it)
    base.trigger('thing.happened', {
      payload: z.object({ value: z.number() }),
      input: ({ event }) => ({ amount: String(event.payload.value), tags: [] }),
    });
  });

  test('a message trigger reads its typed event payload in match and messagePayload', () => {
    const waits = base.waitFor('settled', { message: 'funds.settled', schema: z.object({ amount: z.number() }) });
    waits.trigger('ledger.funds_settled', {
      payload: z.object({ paymentId: z.string(), amount: z.number() }),
      message: 'funds.settled',
      match: { correlationId: ({ event }) => event.payload.paymentId },
      messagePayload: ({ event }) => ({ amount: event.payload.amount }),
    });
    waits.trigger('ledger.funds_settled', { message: 'funds.settled', match: { attribute: 'order', value: ({ event }) => event.idempotencyKey } });
    // @ts-expect-error a match value is a string, a number or null
    waits.trigger('ledger.funds_settled', { message: 'funds.settled', match: { correlationId: () => ({ id: 1 }) } });
  });

  test('retry and http options are typed', () => {
    // @ts-expect-error maxAttempts is a number
    base.proxy('a', { path: '/a', retry: { maxAttempts: 'three' } });
    // @ts-expect-error TRACE is not a supported method
    base.http('h', { method: 'TRACE', url: 'https://example.test' });
  });

  test('workflow input and output helper types', () => {
    const w = base.proxy('a', { path: '/a', output: z.object({ n: z.number() }) }).output(({ steps }) => steps.a.n);
    expectTypeOf<WorkflowOutput<typeof w>>().toEqualTypeOf<number>();
    expectTypeOf<WorkflowInput<typeof w>['amount']>().toEqualTypeOf<number>();
  });
});
