import { afterAll, describe, expect, test } from 'vitest';
import { compile } from '../../compiler/index.ts';
import { flowSource, scratchProject } from './project-helpers.ts';

const source = (logicId: string, retention: string) =>
  flowSource(
    `export const f = workflow({ logicId: '${logicId}', version: 1, domain: 'keep', input: z.object({ n: z.number() })${retention} })\n` +
      "  .proxy('a', { path: '/a' });",
  );

/** A workflow's `retention: { days }` option reaches its LogicVersion; without it the document is as before. */
describe('the retention option', () => {
  const project = scratchProject({ 'flows/kept.ts': source('keep.long', ', retention: { days: 400 }'), 'flows/plain.ts': source('keep.plain', '') });
  afterAll(() => project.dispose());

  test('compiles to retention.days, and a workflow without it carries no retention field', async () => {
    const result = await compile({ root: project.dir });
    const doc = (id: string) => result.versions.find((v) => v.doc.logicId === id)!.doc;
    expect(doc('keep.long').retention).toEqual({ days: 400 });
    expect('retention' in doc('keep.plain')).toBe(false);
  });
});
