import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createFuncRuntime, type FuncRuntime, type FuncRuntimeOptions } from '../../host-functions/index.ts';
import type { Db } from '../store/db.ts';
import { loadModule } from '../store/load-module.ts';
import { asScheduler } from '../store/tx.ts';

/**
 * The engine's module runtime: a module is read from the `modules` table the first time a step
 * needs it (then kept compiled in memory), so every node runs a module published through any
 * other node without a restart or a shared disk.
 */
export function dbFuncRuntime(db: Db, opts: Omit<FuncRuntimeOptions, 'loadModule'> = {}): FuncRuntime {
  return createFuncRuntime({
    ...opts,
    loadModule: async (hash) => {
      const bytes = await asScheduler(db, (c) => loadModule(c, hash));
      if (bytes === null) throw new Error(`module ${hash} is not stored in the database; publish the version that uses it`);
      return bytes;
    },
  });
}

/** Reads `modules/<sha256>.wasm` from an artifact directory (ARCHITECTURE.md, Contracts: artifact directory). */
export async function readArtifactModule(artifactDir: string, hash: string): Promise<Uint8Array> {
  return new Uint8Array(await readFile(join(artifactDir, 'modules', `${hash}.wasm`)));
}
