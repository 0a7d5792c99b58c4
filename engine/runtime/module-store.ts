import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createFuncRuntime, type FuncRuntime } from '../../host-functions/index.ts';

/** A module runtime that loads `modules/<sha256>.wasm` from an artifact directory (ARCHITECTURE.md, Contracts: artifact directory). */
export function funcRuntimeFor(artifactDir: string): FuncRuntime {
  return createFuncRuntime({
    loadModule: async (hash) => new Uint8Array(await readFile(join(artifactDir, 'modules', `${hash}.wasm`))),
  });
}
