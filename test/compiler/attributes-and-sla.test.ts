import { afterAll, expect, test } from 'vitest';
import { compile } from '../../compiler/index.ts';
import { parseLogicVersion } from '../../contracts/index.ts';
import { flowSource, scratchProject } from './project-helpers.ts';

const project = scratchProject({
  'package.json': JSON.stringify({ name: 'scratch', sentin8Flow: { roots: ['flows'] } }),
  'flows/pay.ts': flowSource(
    `export const pay = workflow({
  logicId: 't.pay', version: 1, domain: 't',
  input: z.object({ accountId: z.string(), amount: z.number(), dueAt: z.string() }),
  attributes: {
    accountId: ({ input }) => input.accountId,
    amount: ({ input }) => input.amount * 100,
    dueAt: { type: 'time', value: ({ input }) => input.dueAt },
    settledAt: { type: 'time' },
  },
  sla: { within: 'PT2H' },
})
  .proxy('settle', {
    path: '/settle',
    output: z.object({ at: z.string() }),
    sla: { within: 'PT10M' },
    attributes: { settledAt: ({ output }) => output.at, lastStep: ({ workflow }) => workflow.logicId },
  });`,
  ),
  'flows/plain.ts': flowSource("export const plain = workflow({ logicId: 't.plain', version: 1, domain: 't', input: z.object({}) }).pass('p');"),
});
afterAll(() => project.dispose());

test('attribute mappings and SLAs compile to the optional LogicVersion fields, as JSONata; a definition without them has neither', async () => {
  const result = await compile({ root: project.dir, write: false });
  const doc = result.versions.find((v) => v.doc.logicId === 't.pay')!.doc;
  expect(doc.attributes).toEqual({
    accountId: { value: 'input.accountId' },
    amount: { value: 'input.amount * 100' },
    dueAt: { type: 'time', value: 'input.dueAt' },
    settledAt: { type: 'time' },
  });
  expect(doc.sla).toEqual({ within: 'PT2H' });
  expect(doc.steps['settle']).toMatchObject({ sla: { within: 'PT10M' }, attributes: { settledAt: 'output.at', lastStep: 'workflow.logicId' } });
  expect(() => parseLogicVersion(doc)).not.toThrow();
  const plain = result.versions.find((v) => v.doc.logicId === 't.plain')!.doc;
  expect(Object.keys(plain)).not.toContain('attributes');
  expect(Object.keys(plain)).not.toContain('sla');
});
