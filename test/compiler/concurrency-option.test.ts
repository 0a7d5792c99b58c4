import { afterAll, expect, test } from 'vitest';
import { compile } from '../../compiler/index.ts';
import { flowSource, scratchProject } from './project-helpers.ts';

/** `concurrency` on a step and on the workflow compiles to its JSONata key and limit, like any mapping. */
const project = scratchProject({
  'package.json': JSON.stringify({ name: 'scratch', sentin8Flow: { roots: ['flows'] } }),
  'flows/capture.ts': flowSource(
    "export const capture = workflow({ logicId: 't.capture', version: 1, domain: 't', input: z.object({ accountId: z.string() }),\n" +
      '    concurrency: { key: ({ input }) => input.accountId, limit: 2 } })\n' +
      "  .proxy('charge', { path: '/charge', concurrency: { key: ({ input }) => input.accountId, limit: 1 } });",
  ),
});
afterAll(() => project.dispose());

test('a per-key concurrency option becomes { key: JSONata, limit } in the LogicVersion', async () => {
  const result = await compile({ root: project.dir, write: false });
  const doc = result.versions.find((v) => v.doc.logicId === 't.capture')!.doc;
  expect(doc.concurrency).toEqual({ key: 'input.accountId', limit: 2 });
  expect(doc.steps['charge']).toMatchObject({ concurrency: { key: 'input.accountId', limit: 1 } });
});
