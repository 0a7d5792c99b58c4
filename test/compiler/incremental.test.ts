import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { type CompileResult, createCompiler, watch } from '../../compiler/index.ts';
import { flowSource, scratchProject } from './project-helpers.ts';

const flow = (id: string, path: string) =>
  flowSource(`export const f = workflow({ logicId: '${id}', version: 1, domain: 'inc', input: z.object({ n: z.number() }) })\n  .proxy('a', { path: '${path}', input: ({ input }) => input.n });`);

describe('incremental compiles', () => {
  const project = scratchProject({
    'shared.ts': "export const PATH = '/shared';\n",
    'one.ts': flow('inc.one', '/one'),
    'two.ts': flow('inc.two', '/two'),
  });
  afterAll(() => project.dispose());

  test('a changed file is recompiled; the others keep their artifacts', async () => {
    const session = await createCompiler({ root: project.dir, out: join(project.dir, 'out') });
    try {
      const before = await session.compile();
      const file = project.write('one.ts', flow('inc.one', '/one/v2'));
      const after = await session.compile([file]);
      const hash = (r: CompileResult, id: string) => r.versions.find((v) => v.doc.logicId === id)?.doc.hash;
      expect(hash(after, 'inc.one')).not.toBe(hash(before, 'inc.one'));
      expect(hash(after, 'inc.two')).toBe(hash(before, 'inc.two'));
      expect(after.written).toEqual(['inc.one@1.json', 'inc.one@1.mmd', 'manifest.json']);
    } finally {
      await session.close();
    }
  });

  test('a change to an imported module recompiles the definitions that import it', async () => {
    project.write('two.ts', flowSource(
      "import { PATH } from './shared.ts';\n" +
        "export const f = workflow({ logicId: 'inc.two', version: 1, domain: 'inc', input: z.object({}) }).proxy('a', { path: PATH });",
    ));
    const session = await createCompiler({ root: project.dir, write: false });
    try {
      await session.compile();
      const shared = project.write('shared.ts', "export const PATH = '/shared/v2';\n");
      const after = await session.compile([shared]);
      expect(after.versions.find((v) => v.doc.logicId === 'inc.two')?.doc.steps['a']).toMatchObject({ path: '/shared/v2' });
    } finally {
      await session.close();
    }
  });

  test('watch mode recompiles after a file changes', async () => {
    const results: CompileResult[] = [];
    let changed: () => void = () => undefined;
    const recompiled = new Promise<void>((resolve) => {
      changed = resolve;
    });
    const stop = await watch({
      root: project.dir,
      write: false,
      onResult: (r) => {
        if (!r.ok) throw r.error;
        results.push(r.value);
        if (results.length === 2) changed();
      },
    });
    try {
      project.write('one.ts', flow('inc.one', '/one/v3'));
      await recompiled;
      expect(results[1]?.versions.find((v) => v.doc.logicId === 'inc.one')?.doc.steps['a']).toMatchObject({ path: '/one/v3' });
    } finally {
      await stop();
    }
  });
  test('watch mode keeps seeing a file that editors save by rename (write a temporary file, rename it over)', async () => {
    const seen: CompileResult[] = [];
    let wake: () => void = () => undefined;
    const stop = await watch({
      root: project.dir,
      write: false,
      onResult: (r) => {
        if (!r.ok) throw r.error;
        seen.push(r.value);
        wake();
      },
    });
    const next = (n: number) =>
      new Promise<void>((resolve) => {
        wake = () => seen.length >= n && resolve();
        wake();
      });
    const path = (r: CompileResult | undefined) => r?.versions.find((v) => v.doc.logicId === 'inc.one')?.doc.steps['a'];
    const saveByRename = (text: string) => {
      const tmp = join(project.dir, '.one.ts.swp');
      writeFileSync(tmp, text);
      renameSync(tmp, join(project.dir, 'one.ts'));
    };
    try {
      for (const [n, p] of [[2, '/one/r1'], [3, '/one/r2'], [4, '/one/r3']] as const) {
        saveByRename(flow('inc.one', p));
        await next(n);
        expect(path(seen.at(-1))).toMatchObject({ path: p });
      }
      // a plain write after the renames is seen too
      project.write('one.ts', flow('inc.one', '/one/w'));
      await next(5);
      expect(path(seen.at(-1))).toMatchObject({ path: '/one/w' });
    } finally {
      await stop();
    }
  });
});
