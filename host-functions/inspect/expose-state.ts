import { bodyHas } from './wasm-instructions.ts';
import { appendEntries, exportEntry, withSections } from './wasm-writer.ts';
import type { WasmSections } from './wasm-sections.ts';

/** Export names under which a rewritten module shows its own memories and mutable globals. */
export interface StateExports {
  memories: string[];
  globals: string[];
}

const EXPORT_SECTION = 7;
const KIND = { memory: 0x02, global: 0x03 } as const;
/** Instructions that change an instance outside its memories and globals. */
const TABLE_SET = 0x26;
const MISC = 0xfc;
const CHANGES_TABLES_OR_SEGMENTS = new Set([9 /* data.drop */, 12 /* table.init */, 13 /* elem.drop */, 14 /* table.copy */, 15 /* table.grow */, 17 /* table.fill */]);
/** Extism host state that survives a call on the same plugin. */
const EXTISM_VARS = 'var_set';

/**
 * The module's bytes with every memory and mutable global it defines also exported, so that a
 * runtime can snapshot an instance right after instantiation and put it back into that state
 * after a run: the next run then needs no new instance (instantiating is most of a small run's
 * cost). Function, global and memory indices are unchanged, so traps name the same functions.
 *
 * Null when restoring memories and globals would not make a used instance as good as new: the
 * code writes tables or drops segments, the module keeps Extism vars (host state), or a body
 * cannot be decoded. Call it on a module that passed `inspectStructure` (no imported globals or
 * memories, so defined indices start at 0).
 */
export function exposeState(bytes: Uint8Array, sections: WasmSections): { bytes: Uint8Array; names: StateExports } | null {
  if (sections.imports.some((i) => i.name === EXTISM_VARS)) return null;
  try {
    const writesOutside = (op: number, sub: number | null) => op === TABLE_SET || (op === MISC && CHANGES_TABLES_OR_SEGMENTS.has(sub!));
    if (sections.code.some((body) => bodyHas(bytes, body, writesOutside))) return null;
  } catch {
    return null;
  }
  if (!sections.sections.some((s) => s.id === EXPORT_SECTION)) return null;
  const memories = sections.memories.map((_, i) => ({ name: `sentin8:state:memory:${i}`, kind: KIND.memory, index: i }));
  const globals = sections.globals.flatMap((g, i) => (g.mutable ? [{ name: `sentin8:state:global:${i}`, kind: KIND.global, index: i }] : []));
  const taken = new Set(sections.exports.map((e) => e.name));
  if ([...memories, ...globals].some((e) => taken.has(e.name))) return null;
  const added = [...memories, ...globals].map((e) => exportEntry(e.name, e.kind, e.index));
  const exports = appendEntries(bytes, sections, EXPORT_SECTION, sections.exports.length, added);
  return {
    bytes: withSections(bytes, sections, new Map([[EXPORT_SECTION, exports]])),
    names: { memories: memories.map((e) => e.name), globals: globals.map((e) => e.name) },
  };
}
