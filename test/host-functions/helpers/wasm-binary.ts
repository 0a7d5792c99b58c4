// Hand-assembled WebAssembly binaries, for testing module checks without asc.

export const I32 = 0x7f;
export const I64 = 0x7e;
export const F64 = 0x7c;

export interface RawImport {
  module: string;
  name: string;
  /** A function import (default) with this signature, or an imported memory. */
  params?: number[];
  results?: number[];
  memory?: { min: number; max?: number };
}

export interface RawModuleSpec {
  imports?: RawImport[];
  /** The module's own memory; `null` for none. (Default: { min: 1, max: 1 }) */
  memory?: { min: number; max?: number } | null;
  /** A funcref table the module defines. (Default: none) */
  table?: { min: number };
  /** Bodies (instruction bytes, without the final `end`) of exported functions `() -> i32`. */
  functions?: Record<string, number[]>;
}

/** Encodes a module with the given imports, memory and `() -> i32` exported functions. */
export function rawModule(spec: RawModuleSpec = {}): Uint8Array {
  const imports = spec.imports ?? [];
  const functions = Object.entries(spec.functions ?? { run: [0x41, 0x00] });
  const memory = spec.memory === undefined ? { min: 1, max: 1 } : spec.memory;
  const funcImports = imports.filter((i) => i.memory === undefined);
  const types = [...funcImports.map((i) => funcType(i.params ?? [], i.results ?? [])), funcType([], [I32])];
  const runType = types.length - 1;
  let funcIndex = 0;
  const importEntries = imports.map((i) => {
    const head = [...name(i.module), ...name(i.name)];
    if (i.memory !== undefined) return [...head, 0x02, ...limits(i.memory)];
    return [...head, 0x00, ...uleb(funcIndex++)];
  });
  const exports = functions.map(([fname], i) => [...name(fname), 0x00, ...uleb(funcImports.length + i)]);
  if (memory !== null) exports.push([...name('memory'), 0x02, 0x00]);
  const bodies = functions.map(([, body]) => {
    const code = [0x00, ...body, 0x0b];
    return [...uleb(code.length), ...code];
  });
  return new Uint8Array([
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
    ...section(1, vec(types)),
    ...(imports.length > 0 ? section(2, vec(importEntries)) : []),
    ...section(3, vec(functions.map(() => uleb(runType)))),
    ...(spec.table !== undefined ? section(4, vec([[0x70, ...limits(spec.table)]])) : []),
    ...(memory !== null ? section(5, vec([limits(memory)])) : []),
    ...section(7, vec(exports)),
    ...section(10, vec(bodies)),
  ]);
}

export function uleb(n: number): number[] {
  const out: number[] = [];
  do {
    let b = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    out.push(b);
  } while (n > 0);
  return out;
}

function funcType(params: number[], results: number[]): number[] {
  return [0x60, ...uleb(params.length), ...params, ...uleb(results.length), ...results];
}

function limits(l: { min: number; max?: number }): number[] {
  return l.max === undefined ? [0x00, ...uleb(l.min)] : [0x01, ...uleb(l.min), ...uleb(l.max)];
}

function name(s: string): number[] {
  const bytes = [...new TextEncoder().encode(s)];
  return [...uleb(bytes.length), ...bytes];
}

function vec(items: number[][]): number[] {
  return [...uleb(items.length), ...items.flat()];
}

function section(id: number, content: number[]): number[] {
  return [id, ...uleb(content.length), ...content];
}

// The tsconfig's lib types the WebAssembly namespace but not its values.
interface WasmEngine {
  validate(bytes: Uint8Array): boolean;
  Module: { new (bytes: Uint8Array): object; imports(module: object): { module: string; name: string; kind: string }[] };
}
const engine = (globalThis as unknown as { WebAssembly: WasmEngine }).WebAssembly;

/** The imports of `bytes` as V8 itself reports them. */
export function engineImports(bytes: Uint8Array): { module: string; name: string; kind: string }[] {
  return engine.Module.imports(new engine.Module(bytes));
}

/** Whether V8 accepts `bytes` as a module. */
export function engineValidates(bytes: Uint8Array): boolean {
  return engine.validate(bytes);
}

/** `bytes` compiled by V8, as the runtime takes a module. */
export function engineModule(bytes: Uint8Array): WebAssembly.Module {
  return new engine.Module(bytes) as WebAssembly.Module;
}
