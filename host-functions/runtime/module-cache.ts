import { FuncErrorCode, FuncModuleError } from '../errors.ts';
import { exposeState, type StateExports } from '../inspect/expose-state.ts';
import { inspectStructure, type ModuleInspection, verifyHash } from '../inspect/inspect-module.ts';
import { memoryGrowFunctions } from '../inspect/memory-grow-sites.ts';
import { wasm } from '../inspect/wasm-api.ts';

/** A module that passed every check that does not depend on the step, compiled once. */
export interface LoadedModule {
  hash: string;
  module: WebAssembly.Module;
  inspection: ModuleInspection;
  /** Where the compiled module exports its state for an instance to be reset and reused; null: use each instance once. */
  state: StateExports | null;
  /** Functions containing `memory.grow`; computed on the first trap only. */
  growSites(): ReadonlySet<number>;
}

/**
 * Compiled modules by hash, least recently used evicted first. Concurrent runs
 * of a module not yet loaded share one load; a failed load is not cached, so a
 * repaired artifact is picked up by the next run.
 */
export class ModuleCache {
  readonly #entries = new Map<string, Promise<LoadedModule>>();
  readonly #load: (hash: string) => Promise<Uint8Array>;
  readonly #maxMemoryPages: number;
  readonly #capacity: number;

  constructor(load: (hash: string) => Promise<Uint8Array>, maxMemoryPages: number, capacity: number) {
    this.#load = load;
    this.#maxMemoryPages = maxMemoryPages;
    this.#capacity = capacity;
  }

  get(hash: string): Promise<LoadedModule> {
    const cached = this.#entries.get(hash);
    if (cached !== undefined) {
      this.#entries.delete(hash);
      this.#entries.set(hash, cached);
      return cached;
    }
    const loading = this.#loadAndCheck(hash);
    this.#entries.set(hash, loading);
    loading.catch(() => {
      if (this.#entries.get(hash) === loading) this.#entries.delete(hash);
    });
    for (const oldest of this.#entries.keys()) {
      if (this.#entries.size <= this.#capacity) break;
      this.#entries.delete(oldest);
    }
    return loading;
  }

  async #loadAndCheck(hash: string): Promise<LoadedModule> {
    let bytes: Uint8Array;
    try {
      bytes = await this.#load(hash);
    } catch (err) {
      throw new FuncModuleError(
        FuncErrorCode.MODULE_LOAD_FAILED,
        `could not load module ${hash}: ${err instanceof Error ? err.message : String(err)}; check that modules/${hash}.wasm was published`,
        { cause: err },
      );
    }
    verifyHash(bytes, hash);
    const inspection = inspectStructure(bytes, this.#maxMemoryPages);
    const exposed = exposeState(bytes, inspection.sections);
    let module: WebAssembly.Module;
    try {
      module = await wasm.compile(exposed?.bytes ?? bytes);
    } catch (err) {
      throw new FuncModuleError(FuncErrorCode.INVALID_MODULE, `module ${hash} does not compile: ${String(err)}`);
    }
    let sites: Set<number> | null = null;
    return {
      hash,
      module,
      inspection,
      state: exposed?.names ?? null,
      growSites: () => {
        sites ??= memoryGrowFunctions(bytes, inspection.sections);
        return sites;
      },
    };
  }
}
