import { FuncErrorCode, FuncModuleError } from '../errors.ts';
import { exposeState, type StateExports } from '../inspect/expose-state.ts';
import { meter } from '../inspect/meter.ts';
import { inspectStructure, type ModuleInspection, verifyHash } from '../inspect/inspect-module.ts';
import { memoryGrowFunctions } from '../inspect/memory-grow-sites.ts';
import { wasm } from '../inspect/wasm-api.ts';
import { readSections, type WasmSections } from '../inspect/wasm-sections.ts';

/** A module that passed every check that does not depend on the step, compiled once. */
export interface LoadedModule {
  hash: string;
  module: WebAssembly.Module;
  inspection: ModuleInspection;
  /** Where the compiled module exports its state for an instance to be reset and reused; null: use each instance once. */
  state: StateExports | null;
  /** A metered copy that may run on the engine's own thread (inline-runner.ts); null: workers only. */
  inline: { module: WebAssembly.Module; state: StateExports } | null;
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
  readonly #inlineFuel: number | null;

  /** `inlineFuel`: the fuel to meter inline copies with, or null to make none. */
  constructor(load: (hash: string) => Promise<Uint8Array>, maxMemoryPages: number, capacity: number, inlineFuel: number | null) {
    this.#load = load;
    this.#maxMemoryPages = maxMemoryPages;
    this.#capacity = capacity;
    this.#inlineFuel = inlineFuel;
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
      inline: this.#inlineFuel === null ? null : await inlineCopy(bytes, inspection.sections, this.#inlineFuel),
      growSites: () => {
        sites ??= memoryGrowFunctions(bytes, inspection.sections);
        return sites;
      },
    };
  }
}

/** The module metered and with its state exported, compiled; null when either rewrite refuses it. */
async function inlineCopy(bytes: Uint8Array, sections: WasmSections, fuel: number): Promise<LoadedModule['inline']> {
  const metered = meter(bytes, sections, fuel, (b) => wasm.validate(b));
  const exposed = metered === null ? null : exposeState(metered, readSections(metered));
  if (exposed === null) return null;
  return { module: await wasm.compile(exposed.bytes), state: exposed.names };
}
