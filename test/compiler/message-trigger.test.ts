import { afterAll, describe, expect, test } from 'vitest';
import { compile } from '../../compiler/index.ts';
import { parseLogicVersion } from '../../contracts/index.ts';
import { flowSource, scratchProject } from './project-helpers.ts';

/** A message trigger written with the SDK compiles to its LogicVersion form, each mapping a JSONata expression over `event`. */
describe('the message trigger', () => {
  const project = scratchProject({
    'flows/settle.ts': flowSource(
      "export const f = workflow({ logicId: 'pay.settle', version: 1, domain: 'pay', input: z.object({ id: z.string() }) })\n" +
        "  .waitFor('settled', { message: 'funds.settled', schema: z.object({ amount: z.number() }) })\n" +
        "  .trigger('ledger.funds_settled', {\n" +
        '    payload: z.object({ paymentId: z.string(), cents: z.number() }),\n' +
        "    message: 'funds.settled',\n" +
        '    match: { correlationId: ({ event }) => event.payload.paymentId },\n' +
        '    messagePayload: ({ event }) => ({ amount: event.payload.cents / 100 }),\n' +
        '  })\n' +
        "  .trigger('ledger.order_settled', { payload: z.object({ order: z.number() }), message: 'funds.settled', match: { attribute: 'order', value: ({ event }) => event.payload.order } });",
    ),
  });
  afterAll(() => project.dispose());

  test('compiles match and messagePayload to expressions over event, and the document validates', async () => {
    const result = await compile({ root: project.dir });
    const doc = result.versions.find((v) => v.doc.logicId === 'pay.settle')!.doc;
    expect(doc.triggers).toEqual([
      {
        event: 'ledger.funds_settled',
        message: 'funds.settled',
        match: { correlationId: 'event.payload.paymentId' },
        payload: expect.stringMatching(/"amount":\s*event\.payload\.cents\s*\/\s*100/),
      },
      { event: 'ledger.order_settled', message: 'funds.settled', match: { attribute: 'order', value: 'event.payload.order' } },
    ]);
    expect(() => parseLogicVersion(doc)).not.toThrow();
  });
});
