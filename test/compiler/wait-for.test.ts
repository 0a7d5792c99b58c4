import { afterAll, describe, expect, test } from 'vitest';
import { compile } from '../../compiler/index.ts';
import { flowSource, scratchProject } from './project-helpers.ts';

/** A `waitFor` step written with the SDK compiles to its LogicVersion form, its payload typed into later mappings. */
describe('the waitFor step', () => {
  const project = scratchProject({
    'flows/settle.ts': flowSource(
      "export const f = workflow({ logicId: 'pay.settle', version: 1, domain: 'pay', input: z.object({ id: z.string() }) })\n" +
        "  .waitFor('settled', { message: 'funds.settled', schema: z.object({ amount: z.number() }), timeout: 'P2D', onError: 'release' })\n" +
        "  .proxy('capture', { path: '/capture', input: ({ steps }) => ({ amount: steps.settled.amount }), next: null })\n" +
        "  .proxy('release', { path: '/release' });",
    ),
  });
  afterAll(() => project.dispose());

  test('compiles to kind waitFor with its message, JSON Schema, timeout and onError; the next mapping reads the payload', async () => {
    const result = await compile({ root: project.dir });
    const doc = result.versions.find((v) => v.doc.logicId === 'pay.settle')!.doc;
    expect(doc.steps['settled']).toEqual({
      kind: 'waitFor',
      message: 'funds.settled',
      schema: expect.objectContaining({ type: 'object', properties: { amount: { type: 'number' } }, required: ['amount'] }),
      timeout: 'P2D',
      onError: 'release',
      next: 'capture',
    });
    expect(doc.steps['capture']).toMatchObject({ input: expect.stringContaining('steps.settled.amount') });
  });
});
