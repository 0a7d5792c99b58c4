/** One host call a module made, with the response the engine recorded for it. */
export interface HostCallRecord {
  /** Position of the call in the run, from 0, in call order. */
  n: number;
  /** The `extism:host/user` import the module called. */
  importName: string;
  /** The JSON request body the module passed. */
  request: unknown;
  /** The JSON body returned to the module, or `{"error":{code,message,status}}` for a permanent failure. */
  response: unknown;
}

/** Everything one run of a step module needs. The runtime reads nothing else. */
export interface FuncRunRequest {
  /** Hex sha256 of the wasm bytes; the artifact is `modules/<sha256>.wasm`. */
  moduleHash: string;
  /** The export to call. (Default: `run`) */
  exportName?: string;
  /** The step input, passed to the module as UTF-8 JSON (Extism input). */
  input: unknown;
  /** Import names the module may use in `extism:host/user`; every one is supplied. */
  declaredImports: readonly string[];
  /** Responses of calls 0..k-1 from earlier runs, in call order. */
  recorded: readonly HostCallRecord[];
  /** Served to `env.Date.now` / `env.seed`; taken from the workflow record, never the machine. */
  clock: { nowMs: number; seed: number };
  /**
   * Wall-clock budget of the run, counted from when it is queued: waiting for a worker counts.
   * Past it, the run fails FUNC_TIMEOUT and its worker, if it has one, is terminated.
   */
  timeoutMs: number;
  /**
   * Whose run this is (the engine passes the env): runs wait in one queue per key, served in
   * turn, so one key's backlog or spinning modules never keep another key's runs from a worker.
   * (Default: one shared queue)
   */
  queue?: string;
  /** Aborting it abandons the run: FUNC_ABORTED, and a worker running it is terminated and replaced. */
  signal?: AbortSignal;
}

/** A host call the module made that has no recorded response yet. */
export interface PendingHostCall {
  n: number;
  importName: string;
  request: unknown;
}

export type FuncRunResult =
  | { status: 'done'; output: unknown; calls: number }
  /** First unrecorded host call: the engine makes it, records it and runs again. */
  | { status: 'suspended'; call: PendingHostCall }
  | { status: 'failed'; error: { code: string; message: string } };

export interface FuncRuntime {
  /**
   * Loads `modules/<hash>.wasm` through `loadModule`, verifies the hash,
   * validates imports and the memory cap, caches the compiled module and runs
   * it in a worker. Never rejects: every failure is a `failed` result.
   */
  run(req: FuncRunRequest): Promise<FuncRunResult>;
  /** Terminates the workers. Runs still in flight end as `FUNC_RUNTIME_CLOSED`. */
  close(): Promise<void>;
}

/** A log line a module wrote through Extism's `log_*` functions. */
export interface FuncLogEntry {
  moduleHash: string;
  level: 'debug' | 'info' | 'warn' | 'error';
  message: string;
}

export interface FuncRuntimeOptions {
  /** Returns the bytes of `modules/<hash>.wasm` (from the artifact dir or memory). */
  loadModule: (hash: string) => Promise<Uint8Array>;
  /** The largest memory maximum a module may declare, in 64 KiB pages. (Default: 256 = 16 MiB) */
  maxMemoryPages?: number;
  /**
   * Run a module on the calling thread first, metered so that it holds the thread ~1 ms at most
   * (runtime/inline-runner.ts); a run that does not end done or suspended there, or whose input
   * is over 16 KiB, goes to a worker. (Default: true)
   */
  runInline?: boolean;
  /** Worker threads that run modules; one run at a time each. (Default: 2) */
  poolSize?: number;
  /**
   * Bytes of Extism host memory (`alloc`) one run may allocate in total; the
   * module's requests and output live there. (Default: 4 × maxMemoryPages × 64 KiB)
   */
  maxHostAllocBytes?: number;
  /** Compiled modules kept in memory. (Default: 128) */
  cacheSize?: number;
  /** Heap limit of each worker thread in MiB. (Default: 256) */
  workerHeapMb?: number;
  /** Receives module log lines. A replayed run logs again. (Default: drop them) */
  onLog?: (entry: FuncLogEntry) => void;
}
