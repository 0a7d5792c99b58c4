import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { sha256Hex } from '../../contracts/canonical-json.ts';
import { compile } from '../../compiler/index.ts';
import { CompileErrorCode } from '../../compiler/errors.ts';
import { diagnosticsOf, flowSource, scratchProject } from './project-helpers.ts';

/** The smallest valid WebAssembly module: magic and version. */
const WASM = new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]);
const SHA = sha256Hex(WASM);

const scoring = flowSource(
  "export const scored = workflow({ logicId: 'mods.scored', version: 1, domain: 'mods', input: z.object({ n: z.number() }) })\n" +
    "  .module('scoring', { wasm: './scoring.wasm', imports: { balance: { path: '/balance' } } })\n" +
    "  .func('score', { module: 'scoring', input: ({ input }) => ({ n: input.n }) });",
);

describe('config and modules', () => {
  const project = scratchProject({
    'flow.config.ts': "export default { roots: ['flows'], out: 'build/flow', lock: 'locks/flow.lock.json' };\n",
    'flows/scored.ts': scoring,
    'flows/scoring.wasm': WASM,
    'elsewhere/ignored.ts': scoring.replace('mods.scored', 'mods.ignored'),
  });
  afterAll(() => project.dispose());

  test('flow.config.ts picks the roots and the artifact directory', async () => {
    const result = await compile({ root: project.dir });
    expect(result.outDir).toBe(join(project.dir, 'build/flow'));
    expect(result.versions.map((v) => v.doc.logicId)).toEqual(['mods.scored']);
  });

  test('a prebuilt wasm module is hashed, copied to modules/<sha256>.wasm and listed in the manifest', async () => {
    const result = await compile({ root: project.dir });
    expect(result.versions[0]?.doc.modules).toEqual({ scoring: { sha256: SHA, imports: { balance: { path: '/balance' } } } });
    expect(new Uint8Array(readFileSync(join(project.dir, 'build/flow/modules', `${SHA}.wasm`)))).toEqual(WASM);
    expect(result.manifest.modules).toEqual([{ sha256: SHA, file: `modules/${SHA}.wasm`, bytes: WASM.length }]);
  });

  test('a module file that is not WebAssembly is refused', async () => {
    project.write('flows/scoring.wasm', 'not wasm');
    const diagnostics = await diagnosticsOf(compile({ root: project.dir, write: false }));
    expect(diagnostics.map((d) => d.code)).toEqual([CompileErrorCode.module]);
  });
});

test('package.json "sentin8Flow" configures the roots', async () => {
  const project = scratchProject({
    'package.json': JSON.stringify({ name: 'author', sentin8Flow: { roots: ['src/flows'] } }),
    'src/flows/a.ts': flowSource("export const a = workflow({ logicId: 'cfg.a', version: 1, domain: 'cfg', input: z.object({}) }).pass('p');"),
    'other/b.ts': flowSource("export const b = workflow({ logicId: 'cfg.b', version: 1, domain: 'cfg', input: z.object({}) }).pass('p');"),
  });
  try {
    const result = await compile({ root: project.dir, write: false });
    expect(result.versions.map((v) => `${v.source}#${v.exportName}`)).toEqual(['src/flows/a.ts#a']);
  } finally {
    project.dispose();
  }
});
