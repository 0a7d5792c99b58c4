import { createHash } from 'node:crypto';
import { FuncErrorCode, FuncModuleError } from '../errors.ts';
import { wasm as wasmApi } from './wasm-api.ts';
import { invalid } from './wasm-reader.ts';
import { type FuncType, readSections, type WasmImport, type WasmSections } from './wasm-sections.ts';

/** Default cap on a module's declared memory maximum: 256 pages = 16 MiB. */
export const DEFAULT_MAX_MEMORY_PAGES = 256;
/** Upper bound of the cap itself: 65536 pages = 4 GiB, all a 32-bit memory can address. */
const MAX_PAGES_LIMIT = 65536;

const USER = 'extism:host/user';
const EXTISM_ENV = 'extism:host/env';
/** What the Extism JS runtime supplies in `extism:host/env` (1.0.3, plus two stubs we add). */
const EXTISM_ENV_FUNCTIONS = new Set([
  'alloc', 'free', 'length', 'length_unsafe', 'load_u8', 'load_u64', 'store_u8', 'store_u64',
  'input_offset', 'input_length', 'input_load_u8', 'input_load_u64', 'output_set', 'error_set',
  'config_get', 'var_get', 'var_set', 'http_request', 'http_status_code',
  'log_warn', 'log_info', 'log_debug', 'log_error', 'log_trace', 'get_log_level',
]);
const I64 = 0x7e;
const F64 = 0x7c;
/** AssemblyScript's `Date.now()` and `Math.random()` seed; served from the workflow record. */
const CLOCK_IMPORTS: Record<string, FuncType> = {
  'Date.now': { params: [], results: [F64] },
  seed: { params: [], results: [F64] },
};
const HOST_CALL: FuncType = { params: [I64], results: [I64] };

export interface InspectOptions {
  /** When set, the bytes must hash to it (hex sha256) or FUNC_HASH_MISMATCH is thrown. */
  expectedHash?: string;
  /** Largest memory maximum allowed, in 64 KiB pages. (Default: 256) */
  maxMemoryPages?: number;
}

/** What a module needs from the host, once it passed every check. */
export interface ModuleInspection {
  /** Every import, as `WebAssembly.Module.imports()` lists them. */
  imports: { module: string; name: string; kind: WasmImport['kind'] }[];
  /** `extism:host/user` functions the module imports (a subset of the declared ones). */
  hostImports: string[];
  /** Names of the exported functions. */
  exports: string[];
  /** The largest declared memory maximum, in pages (0 for a module without memory). */
  memoryMaxPages: number;
  /** Which clock imports the module uses. */
  clock: { now: boolean; seed: boolean };
  /** The parsed sections, kept for trap classification. */
  sections: WasmSections;
}

/**
 * Checks a module against the rules of host-functions/README.md before it may run: the hash,
 * WASI, the import allowlist (Extism env, the declared host functions, the two
 * clock imports) with their signatures, and a memory maximum within the cap.
 * Throws a {@link FuncModuleError} naming the offending import or limit.
 */
export function inspectModule(
  wasm: Uint8Array,
  declaredImports: readonly string[],
  opts: InspectOptions = {},
): ModuleInspection {
  if (opts.expectedHash !== undefined) verifyHash(wasm, opts.expectedHash);
  const inspection = inspectStructure(wasm, opts.maxMemoryPages ?? DEFAULT_MAX_MEMORY_PAGES);
  checkDeclaredImports(inspection, declaredImports);
  return inspection;
}

export function sha256Hex(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

export function verifyHash(wasm: Uint8Array, expectedHash: string): void {
  const actual = sha256Hex(wasm);
  if (actual !== expectedHash.toLowerCase()) {
    throw new FuncModuleError(
      FuncErrorCode.HASH_MISMATCH,
      `module bytes hash to ${actual}, not ${expectedHash}; the artifact is corrupt or stale, recompile and republish it`,
    );
  }
}

/** Every check that does not depend on the step's declared imports. */
export function inspectStructure(wasm: Uint8Array, maxMemoryPages: number): ModuleInspection {
  if (!Number.isInteger(maxMemoryPages) || maxMemoryPages < 1 || maxMemoryPages > MAX_PAGES_LIMIT) {
    throw new RangeError(`maxMemoryPages must be an integer in 1..${MAX_PAGES_LIMIT}, got ${maxMemoryPages}`);
  }
  if (!wasmApi.validate(wasm)) throw invalid('WebAssembly.validate refused it');
  const sections = readSections(wasm);
  const wasi = sections.imports.find((i) => i.module.startsWith('wasi_'));
  if (wasi !== undefined) {
    throw new FuncModuleError(
      FuncErrorCode.WASI_REFUSED,
      `module imports ${wasi.module}::${wasi.name}; WASI is disabled, build without WASI (asc needs no WASI shim)`,
    );
  }
  for (const imp of sections.imports) checkImport(imp);
  const memoryMaxPages = checkMemories(sections, maxMemoryPages);
  const names = (module: string) => sections.imports.filter((i) => i.module === module).map((i) => i.name);
  return {
    imports: sections.imports.map(({ module, name, kind }) => ({ module, name, kind })),
    hostImports: names(USER),
    exports: sections.exports.filter((e) => e.kind === 'function').map((e) => e.name),
    memoryMaxPages,
    clock: { now: names('env').includes('Date.now'), seed: names('env').includes('seed') },
    sections,
  };
}

export function checkDeclaredImports(inspection: ModuleInspection, declaredImports: readonly string[]): void {
  const declared = new Set(declaredImports);
  const missing = inspection.hostImports.find((name) => !declared.has(name));
  if (missing !== undefined) {
    throw new FuncModuleError(
      FuncErrorCode.IMPORT_REFUSED,
      `module imports ${USER}::${missing}, which the step does not declare; add it to modules.<name>.imports or remove it from the module`,
    );
  }
}

function checkImport(imp: WasmImport): void {
  const where = `${imp.module}::${imp.name}`;
  const expected =
    imp.module === USER ? HOST_CALL : imp.module === 'env' ? CLOCK_IMPORTS[imp.name] : undefined;
  const allowed =
    imp.module === USER ||
    (imp.module === EXTISM_ENV && EXTISM_ENV_FUNCTIONS.has(imp.name)) ||
    expected !== undefined;
  if (!allowed || imp.kind !== 'function') {
    throw new FuncModuleError(
      FuncErrorCode.IMPORT_REFUSED,
      `module imports ${imp.kind} ${where}, which is not allowed; a module may import only Extism's ${EXTISM_ENV} functions, declared ${USER} functions and env.Date.now / env.seed`,
    );
  }
  if (expected !== undefined && !sameType(imp.type, expected)) {
    throw new FuncModuleError(
      FuncErrorCode.IMPORT_SIGNATURE,
      `import ${where} has signature ${show(imp.type)}, expected ${show(expected)}`,
    );
  }
}

function checkMemories(sections: WasmSections, cap: number): number {
  let max = 0;
  for (const memory of sections.memories) {
    if (memory.max === null) {
      throw new FuncModuleError(
        FuncErrorCode.NO_MEMORY_CAP,
        `module memory has no maximum; build it with asc --maximumMemory N (N <= ${cap} pages)`,
      );
    }
    if (memory.max > cap) {
      throw new FuncModuleError(
        FuncErrorCode.MEMORY_CAP_TOO_LARGE,
        `module memory maximum is ${memory.max} pages, above the cap of ${cap}; build it with --maximumMemory ${cap} or less`,
      );
    }
    max = Math.max(max, memory.max);
  }
  return max;
}

function sameType(a: FuncType | null, b: FuncType): boolean {
  return a !== null && a.params.join() === b.params.join() && a.results.join() === b.results.join();
}

const VALTYPE_NAMES: Record<number, string> = { 127: 'i32', 126: 'i64', 125: 'f32', 124: 'f64' };

function show(type: FuncType | null): string {
  if (type === null) return '(unknown)';
  const list = (xs: number[]) => xs.map((x) => VALTYPE_NAMES[x] ?? `0x${x.toString(16)}`).join(', ');
  return `(${list(type.params)}) -> (${list(type.results)})`;
}
