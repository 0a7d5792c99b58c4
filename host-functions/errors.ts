/**
 * Error codes of the Sentin8:Func runtime. They are stable strings: the engine
 * stores them on failed steps and operators match on them.
 *
 * Module codes come from {@link inspectModule} (a `FuncModuleError`) and from
 * `FuncRuntime.run` as a failed result; run codes only ever come back as a
 * failed result, never as a rejected promise.
 */
export const FuncErrorCode = {
  /** The module bytes do not hash to the requested sha256. */
  HASH_MISMATCH: 'FUNC_HASH_MISMATCH',
  /** The module imports something outside the allowed set. */
  IMPORT_REFUSED: 'FUNC_IMPORT_REFUSED',
  /** An allowed import has the wrong signature for the host ABI. */
  IMPORT_SIGNATURE: 'FUNC_IMPORT_SIGNATURE',
  /** The module imports WASI (`wasi_snapshot_preview1`), which is disabled. */
  WASI_REFUSED: 'FUNC_WASI_REFUSED',
  /** The module's memory declares no maximum. */
  NO_MEMORY_CAP: 'FUNC_NO_MEMORY_CAP',
  /** The module's memory maximum is above the runtime's cap. */
  MEMORY_CAP_TOO_LARGE: 'FUNC_MEMORY_CAP_TOO_LARGE',
  /** The bytes are not a valid WebAssembly module. */
  INVALID_MODULE: 'FUNC_INVALID_MODULE',
  /** The requested export is not a function of the module. */
  EXPORT_NOT_FOUND: 'FUNC_EXPORT_NOT_FOUND',
  /** `loadModule` failed (missing artifact, I/O error). Infrastructure, may be retried. */
  MODULE_LOAD_FAILED: 'FUNC_MODULE_LOAD_FAILED',
  /** The run request itself is malformed (hash format, recorded calls, input, timeout). */
  BAD_RUN_REQUEST: 'FUNC_BAD_RUN_REQUEST',
  /** The run took longer than `timeoutMs`; its worker was terminated. */
  TIMEOUT: 'FUNC_TIMEOUT',
  /** The module trapped or aborted; the message is the module's. */
  TRAP: 'FUNC_TRAP',
  /** The module needed more memory than its cap allows. */
  MEMORY: 'FUNC_MEMORY',
  /** The module's output is missing or not UTF-8 JSON. */
  BAD_OUTPUT: 'FUNC_BAD_OUTPUT',
  /** The module passed a host call a request that is not UTF-8 JSON. */
  BAD_HOST_REQUEST: 'FUNC_BAD_HOST_REQUEST',
  /** The module's host calls no longer match the recorded ones. */
  REPLAY_DIVERGED: 'FUNC_REPLAY_DIVERGED',
  /** The worker running the module died. Infrastructure, may be retried. */
  WORKER_CRASHED: 'FUNC_WORKER_CRASHED',
  /** `close()` was called before the run finished. */
  RUNTIME_CLOSED: 'FUNC_RUNTIME_CLOSED',
  /** The run's signal aborted (its instance cancelled or taken over, the engine stopping); its worker was stopped. */
  ABORTED: 'FUNC_ABORTED',
} as const;
export type FuncErrorCode = (typeof FuncErrorCode)[keyof typeof FuncErrorCode];

/** Codes that describe the environment rather than the module: a retry may succeed. */
export const RETRYABLE_FUNC_CODES: ReadonlySet<FuncErrorCode> = new Set([
  FuncErrorCode.MODULE_LOAD_FAILED,
  FuncErrorCode.WORKER_CRASHED,
  FuncErrorCode.RUNTIME_CLOSED,
  FuncErrorCode.ABORTED,
]);

/** A module was refused before it ran. Fix the module or its declared imports; retrying does not help. */
export class FuncModuleError extends Error {
  override readonly name = 'FuncModuleError';
  readonly code: FuncErrorCode;

  constructor(code: FuncErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}
