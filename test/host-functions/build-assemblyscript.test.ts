import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildAssemblyScriptModule } from '../../compiler/modules/build-assemblyscript.ts';
import { WasmBuildError } from '../../compiler/modules/errors.ts';
import { inspectModule } from '../../host-functions/index.ts';
import { engineImports } from './helpers/wasm-binary.ts';

const ONE_CALL = fileURLToPath(new URL('./modules/one-call.as.ts', import.meta.url));
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'sentin8-asc-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('buildAssemblyScriptModule', () => {
  it('building the same source twice gives identical bytes, named by their sha256', async () => {
    const a = await buildAssemblyScriptModule({ entry: ONE_CALL, outDir: path.join(dir, 'a'), maximumMemoryPages: 8 });
    const b = await buildAssemblyScriptModule({ entry: ONE_CALL, outDir: path.join(dir, 'b'), maximumMemoryPages: 8 });
    expect(a.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(b.sha256).toBe(a.sha256);
    expect(a.path).toBe(path.join(dir, 'a', 'modules', `${a.sha256}.wasm`));
    const [bytesA, bytesB] = await Promise.all([readFile(a.path), readFile(b.path)]);
    expect(bytesA.equals(bytesB)).toBe(true);
    expect(a.bytes).toBe(bytesA.byteLength);
  });

  it('emits a module the runtime accepts: memory capped, no env.abort, only the declared host import', async () => {
    const built = await buildAssemblyScriptModule({ entry: ONE_CALL, outDir: dir, maximumMemoryPages: 8 });
    const wasm = new Uint8Array(await readFile(built.path));
    const inspection = inspectModule(wasm, ['lookup'], { expectedHash: built.sha256 });
    expect(inspection.memoryMaxPages).toBe(8);
    expect(inspection.hostImports).toEqual(['lookup']);
    expect(inspection.imports.some((i) => i.module === 'env')).toBe(false);
    expect(inspection.imports).toEqual(engineImports(wasm));
  });

  it('a different memory maximum changes the bytes and the hash', async () => {
    const small = await buildAssemblyScriptModule({ entry: ONE_CALL, outDir: dir, maximumMemoryPages: 8 });
    const large = await buildAssemblyScriptModule({ entry: ONE_CALL, outDir: dir, maximumMemoryPages: 9 });
    expect(large.sha256).not.toBe(small.sha256);
  });

  it('a module outside the repository imports the guest library by its package path, sentin8-flow/guest', async () => {
    const source = await readFile(fileURLToPath(new URL('../../examples/workflows/modules/risk-score.as.ts', import.meta.url)), 'utf8');
    expect(source).toContain('from "sentin8-flow/guest"');
    // copied out of examples/, as an author would: no relative path back into this repository
    const entry = path.join(dir, 'copied', 'risk-score.as.ts');
    await mkdir(path.dirname(entry), { recursive: true });
    await writeFile(entry, source);
    const built = await buildAssemblyScriptModule({ entry, outDir: path.join(dir, 'copied-out') });
    const inspection = inspectModule(new Uint8Array(await readFile(built.path)), ['accountHistory'], { expectedHash: built.sha256 });
    expect(inspection.hostImports).toEqual(['accountHistory']);
  });

  it('a build error throws COMPILE_WASM_BUILD with file:line:col from asc', async () => {
    const entry = path.join(dir, 'broken.ts');
    await writeFile(entry, 'export function run(): i32 {\n  const x: i32 = 1;\n  return x + notDefinedAnywhere;\n}\n');
    const err = await buildAssemblyScriptModule({ entry, outDir: dir }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WasmBuildError);
    const buildError = err as WasmBuildError;
    expect(buildError.code).toBe('COMPILE_WASM_BUILD');
    expect(buildError.diagnostics[0]).toMatchObject({ file: entry, line: 3, column: 14 });
    expect(buildError.message).toContain(`${entry}:3:14`);
    expect(buildError.message).toContain('notDefinedAnywhere');
  });

  it('a missing entry file is a build error, not a crash', async () => {
    const err = await buildAssemblyScriptModule({ entry: path.join(dir, 'nope.ts'), outDir: dir }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WasmBuildError);
  });
});
