// Messages between the runtime (parent thread) and worker-entry.mjs.
import type { StateExports } from '../inspect/expose-state.ts';
import type { PendingHostCall } from '../types.ts';

/** One run, as posted to a worker. WebAssembly.Module is shared, not copied. */
export interface RunTask {
  id: number;
  /** Names the module: a worker keeps a fresh instance of the module it ran last ready for the next run. */
  moduleHash: string;
  module: WebAssembly.Module;
  /** Where the module exports its state; a worker then resets a used instance instead of making a new one. */
  state: StateExports | null;
  exportName: string;
  inputJson: string;
  declaredImports: readonly string[];
  recorded: readonly { importName: string; request: unknown; response: unknown }[];
  clock: { nowMs: number; seed: number };
  maxHostAllocBytes: number;
}

/** How a run ended, as the worker saw it. */
export type WorkerOutcome =
  | { kind: 'done'; output: unknown; calls: number }
  | { kind: 'suspended'; call: PendingHostCall }
  | { kind: 'failed'; code: string; message: string }
  /** A WebAssembly trap; the parent decides FUNC_TRAP or FUNC_MEMORY from the trapping function. */
  | { kind: 'trap'; message: string; funcIndex: number | null };

export type WorkerMessage =
  | { type: 'ready' }
  | { type: 'log'; id: number; level: 'debug' | 'info' | 'warn' | 'error'; message: string }
  | { type: 'result'; id: number; outcome: WorkerOutcome };
