import { bodyHas } from './wasm-instructions.ts';
import type { WasmSections } from './wasm-sections.ts';

const MEMORY_GROW = 0x40;

/**
 * Indices (in the function index space, imports first, as V8 numbers them in
 * `wasm-function[N]`) of the functions whose body contains `memory.grow`.
 *
 * Why: AssemblyScript's allocator traps with a bare `unreachable` right after
 * `memory.grow` fails, so a trap inside such a function is the module running
 * out of memory (FUNC_MEMORY), not a bug in its logic. A body this decoder
 * does not understand (an unknown opcode) simply counts as "no".
 */
export function memoryGrowFunctions(bytes: Uint8Array, sections: WasmSections): Set<number> {
  const imported = sections.imports.filter((i) => i.kind === 'function').length;
  const found = new Set<number>();
  sections.code.forEach((body, i) => {
    try {
      if (bodyHas(bytes, body, (op) => op === MEMORY_GROW)) found.add(imported + i);
    } catch {
      // Undecodable body: leave it out.
    }
  });
  return found;
}
