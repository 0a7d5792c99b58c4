/**
 * Sentin8:Func — runs WASM step modules through Extism with recorded,
 * replayable host calls (ARCHITECTURE.md, Contracts: WASM host ABI). The engine uses `createFuncRuntime`;
 * the compiler and `s8flow publish` can vet a module with `inspectModule`.
 * AssemblyScript authors import the guest library in `./guest/`.
 */
export { FuncErrorCode, FuncModuleError, RETRYABLE_FUNC_CODES } from './errors.ts';
export {
  DEFAULT_MAX_MEMORY_PAGES,
  type InspectOptions,
  inspectModule,
  type ModuleInspection,
  sha256Hex,
} from './inspect/inspect-module.ts';
export { createFuncRuntime } from './runtime/func-runtime.ts';
export type {
  FuncLogEntry,
  FuncRunRequest,
  FuncRunResult,
  FuncRuntime,
  FuncRuntimeOptions,
  HostCallRecord,
  PendingHostCall,
} from './types.ts';
