import { skipConstExpr } from './wasm-instructions.ts';
import { invalid, WasmReader } from './wasm-reader.ts';

/** A function signature; value types as their binary codes (0x7f i32, 0x7e i64, 0x7d f32, 0x7c f64). */
export interface FuncType {
  params: number[];
  results: number[];
}

export type ImportKind = 'function' | 'table' | 'memory' | 'global' | 'tag';

export interface WasmImport {
  module: string;
  name: string;
  kind: ImportKind;
  /** Signature of a function import; null when its type could not be read. */
  type: FuncType | null;
}

export interface WasmLimits {
  min: number;
  max: number | null;
}

export interface WasmExport {
  name: string;
  kind: 'function' | 'table' | 'memory' | 'global' | 'tag';
}

/** The parts of a module the runtime checks, read straight from the binary. */
export interface WasmSections {
  types: (FuncType | null)[];
  imports: WasmImport[];
  /** Memories the module defines itself (imported memories are in `imports`). */
  memories: WasmLimits[];
  exports: WasmExport[];
  /** Type index of each function the module defines, in index order after the imported ones. */
  functions: number[];
  /** Globals the module defines itself, in index order after the imported ones. */
  globals: { mutable: boolean }[];
  /** Byte ranges of every section (id, whole section, payload), in file order. */
  sections: { id: number; start: number; payload: number; end: number }[];
  /** Byte ranges of the function bodies, in function index order after the imports. */
  code: { start: number; end: number }[];
}

const SECTION = { type: 1, import: 2, function: 3, memory: 5, global: 6, export: 7, code: 10 } as const;
const EXTERN_KINDS = ['function', 'table', 'memory', 'global', 'tag'] as const;
const MAGIC = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];

/** Reads the type, import, function, memory, global, export and code sections; skips the rest. */
export function readSections(bytes: Uint8Array): WasmSections {
  if (bytes.length < 8 || MAGIC.some((b, i) => bytes[i] !== b)) {
    throw invalid('missing the \\0asm version 1 header');
  }
  const out: WasmSections = { types: [], imports: [], memories: [], exports: [], functions: [], globals: [], sections: [], code: [] };
  const r = new WasmReader(bytes, 8);
  while (!r.done) {
    const header = r.pos;
    const id = r.byte();
    const size = r.uleb();
    const start = r.pos;
    r.skip(size);
    out.sections.push({ id, start: header, payload: start, end: start + size });
    const s = new WasmReader(bytes, start, start + size);
    if (id === SECTION.type) out.types = vec(s, () => readFuncType(s));
    else if (id === SECTION.import) out.imports = vec(s, () => readImport(s, out.types));
    else if (id === SECTION.function) out.functions = vec(s, () => s.uleb());
    else if (id === SECTION.memory) out.memories = vec(s, () => readLimits(s));
    else if (id === SECTION.global) out.globals = vec(s, () => readGlobal(s));
    else if (id === SECTION.export) out.exports = vec(s, () => readExport(s));
    else if (id === SECTION.code) out.code = vec(s, () => readBody(s));
  }
  return out;
}

function vec<T>(r: WasmReader, item: () => T): T[] {
  const count = r.uleb();
  const items: T[] = [];
  for (let i = 0; i < count; i++) items.push(item());
  return items;
}

/** A plain function type, or null for the types of newer proposals (GC rec groups, subtypes). */
function readFuncType(r: WasmReader): FuncType | null {
  if (r.byte() !== 0x60) {
    r.pos = r.end;
    return null;
  }
  const params = vec(r, () => r.byte());
  const results = vec(r, () => r.byte());
  return { params, results };
}

function readImport(r: WasmReader, types: (FuncType | null)[]): WasmImport {
  const module = r.name();
  const name = r.name();
  const kindByte = r.byte();
  const kind = EXTERN_KINDS[kindByte];
  if (kind === undefined) throw invalid(`import ${module}::${name} has unknown kind ${kindByte}`);
  let type: FuncType | null = null;
  if (kind === 'function') type = types[r.uleb()] ?? null;
  else if (kind === 'table') {
    r.skipLeb();
    readLimits(r);
  } else if (kind === 'memory') readLimits(r);
  else if (kind === 'global') r.skip(2);
  else {
    r.byte();
    r.skipLeb();
  }
  return { module, name, kind, type };
}

function readLimits(r: WasmReader): WasmLimits {
  const flags = r.byte();
  const bits = flags & 0x04 ? 64 : 32;
  const min = r.uleb(bits);
  const max = flags & 0x01 ? r.uleb(bits) : null;
  return { min, max };
}

function readGlobal(r: WasmReader): { mutable: boolean } {
  const type = r.byte();
  if (type === 0x63 || type === 0x64) r.skipLeb(); // a typed reference: its heap type follows
  const mutable = r.byte() === 0x01;
  skipConstExpr(r);
  return { mutable };
}

function readExport(r: WasmReader): WasmExport {
  const name = r.name();
  const kind = EXTERN_KINDS[r.byte()];
  if (kind === undefined) throw invalid(`export ${name} has an unknown kind`);
  r.skipLeb();
  return { name, kind };
}

function readBody(r: WasmReader): { start: number; end: number } {
  const size = r.uleb();
  const start = r.pos;
  r.skip(size);
  return { start, end: start + size };
}
