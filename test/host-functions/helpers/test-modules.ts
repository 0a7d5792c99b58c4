import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildAssemblyScriptModule } from '../../../compiler/modules/build-assemblyscript.ts';
import type { FuncRunRequest } from '../../../host-functions/index.ts';

const MODULES_DIR = fileURLToPath(new URL('../modules/', import.meta.url));

/** Memory maximum the test modules are built with; runtimes in tests use it as their cap. */
export const TEST_MEMORY_PAGES = 16;

export interface BuiltTestModules {
  /** Artifact directory holding `modules/<sha256>.wasm`. */
  dir: string;
  /** sha256 of each module, by source name (`echo` for `modules/echo.as.ts`). */
  hash: Record<string, string>;
  /** A `loadModule` over the artifact directory that counts its calls. */
  load: ((hash: string) => Promise<Uint8Array>) & { calls: number };
  cleanup(): Promise<void>;
}

/** Builds `test/host-functions/modules/<name>.as.ts` with asc into a fresh temp artifact dir. */
export async function buildTestModules(names: readonly string[]): Promise<BuiltTestModules> {
  const dir = await mkdtemp(path.join(tmpdir(), 'sentin8-func-'));
  const hash: Record<string, string> = {};
  for (const name of names) {
    const built = await buildAssemblyScriptModule({
      entry: path.join(MODULES_DIR, `${name}.as.ts`),
      outDir: dir,
      maximumMemoryPages: TEST_MEMORY_PAGES,
    });
    hash[name] = built.sha256;
  }
  const load = Object.assign(
    async (h: string) => {
      load.calls++;
      return new Uint8Array(await readFile(path.join(dir, 'modules', `${h}.wasm`)));
    },
    { calls: 0 },
  );
  return { dir, hash, load, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

/** A run request with neutral defaults. */
export function runRequest(moduleHash: string, overrides: Partial<FuncRunRequest> = {}): FuncRunRequest {
  return {
    moduleHash,
    exportName: 'run',
    input: {},
    declaredImports: [],
    recorded: [],
    clock: { nowMs: 1_700_000_000_000, seed: 7 },
    timeoutMs: 5_000,
    ...overrides,
  };
}
