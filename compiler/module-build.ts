import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { sha256Hex } from '../contracts/canonical-json.ts';
import type { DraftModule } from '../sdk/draft.ts';
import { CompileError, CompileErrorCode } from './errors.ts';

/** A module binary ready to be written as `modules/<sha256>.wasm`. */
export interface BuiltModule {
  readonly sha256: string;
  readonly bytes: Uint8Array;
}

/**
 * Produces a module's binary: a prebuilt `.wasm` is read and hashed; an AssemblyScript entry goes
 * through `buildAssemblyScriptModule` (the hook into compiler/modules/, imported only when a
 * definition needs it). Paths are relative to the definition file.
 */
export async function buildModule(mod: DraftModule, definitionFile: string, label: string): Promise<BuiltModule> {
  const base = dirname(definitionFile);
  const fail = (code: string, message: string): never => {
    throw new CompileError([{ code, message: `${label} module "${mod.name}": ${message}`, file: label }]);
  };
  if (mod.source.kind === 'wasm') {
    const path = resolve(base, mod.source.path);
    if (!existsSync(path)) fail(CompileErrorCode.module, `${mod.source.path} does not exist`);
    const bytes = new Uint8Array(readFileSync(path));
    if (bytes[0] !== 0 || bytes[1] !== 0x61 || bytes[2] !== 0x73 || bytes[3] !== 0x6d) {
      fail(CompileErrorCode.module, `${mod.source.path} is not a WebAssembly binary`);
    }
    return { sha256: sha256Hex(bytes), bytes };
  }
  const { buildAssemblyScriptModule } = (await import('./modules/build-assemblyscript.ts').catch((err: { code?: unknown }) =>
    err.code === 'ERR_MODULE_NOT_FOUND'
      ? fail(CompileErrorCode.moduleBuilderMissing, `building AssemblyScript needs the assemblyscript and @extism/as-pdk packages (${String(err)}); use a prebuilt wasm`)
      : Promise.reject(err),
  ));
  const outDir = await mkdtemp(join(tmpdir(), 's8flow-asc-'));
  try {
    const built = await buildAssemblyScriptModule({
      entry: resolve(base, mod.source.entry),
      outDir,
      ...(mod.source.maximumMemoryPages === undefined ? {} : { maximumMemoryPages: mod.source.maximumMemoryPages }),
    });
    const bytes = new Uint8Array(readFileSync(built.path));
    return { sha256: sha256Hex(bytes), bytes };
  } catch (err) {
    if (err instanceof CompileError) throw err;
    const e = err as { code?: unknown; message?: string; diagnostics?: { file: string; line: number; column: number; message: string }[] };
    if (typeof e.code === 'string' && Array.isArray(e.diagnostics) && e.diagnostics.length > 0) {
      throw new CompileError(e.diagnostics.map((d) => ({ code: e.code as string, message: d.message, file: d.file, line: d.line, column: d.column })));
    }
    return fail(CompileErrorCode.module, `AssemblyScript build failed: ${e.message ?? String(err)}`);
  } finally {
    await rm(outDir, { recursive: true, force: true });
  }
}
