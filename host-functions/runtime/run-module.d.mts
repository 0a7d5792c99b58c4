// Types of run-module.mjs (plain JavaScript so that a worker thread loads it without a loader).
import type { Plugin } from '@extism/extism';
import type { StateExports } from '../inspect/expose-state.ts';
import type { RunTask, WorkerOutcome } from './protocol.ts';

/** An instance of a module, made ahead of a run or put back after one. */
export interface Instance {
  plugin: Plugin;
  bindings: { tainted: boolean };
  /** Taken when the instance was made ahead of a run, for modules that export their state. */
  snapshot: { exports: Record<string, unknown> } | null;
}

export function instantiate(module: WebAssembly.Module, importNames: readonly string[], exposed?: StateExports | null): Promise<Instance>;

export function runModule(
  task: RunTask,
  log: (level: 'debug' | 'info' | 'warn' | 'error', message: string) => void,
  ready?: Instance | null,
): Promise<{ outcome: WorkerOutcome; reusable: Instance | null }>;
