import { FUEL_EXPORT } from '../inspect/meter.ts';
import type { RunTask, WorkerOutcome } from './protocol.ts';
import { type Instance, instantiate, runModule } from './run-module.mjs';
import type { LogSink } from './worker-pool.ts';

/**
 * Fuel for one run on the engine's thread, in meter.ts's units: on the 2-core box the bench runs
 * on, plain wasm spends 8–20 units a nanosecond, so about a millisecond at most.
 */
export const INLINE_FUEL = 10_000_000;
/** Inputs longer than this (characters of JSON) go straight to a worker: they would run out of fuel anyway. */
export const INLINE_MAX_INPUT = 16 * 1024;

/**
 * Runs metered modules (meter.ts) on the calling thread, which no timer can interrupt: fuel bounds
 * how long a run holds it. A worker's run costs two thread wake-ups, several times a small module's
 * own run; this costs none. Instances are put back as they were made after each run and kept,
 * up to `capacity` in all: runs of one module that overlap (each waits on a microtask or two)
 * each need one, and would otherwise make a new one on this thread every time. A module whose
 * start function touches the host (a clock read, a log) or traps needs a new instance for every
 * run, so it runs on workers, which make them.
 *
 * Only a run that ends done or suspended counts; any other (out of fuel, a trap, a stack overflow
 * on this thread's smaller stack, a host memory limit) returns null and goes to a worker, whose
 * outcome is authoritative, as it was before runs went inline. The module is deterministic, so a
 * run's outcome does not depend on where it ran. Its log lines are held until the run counts, so
 * that a run made again on a worker does not log twice.
 */
export class InlineRunner {
  /** Instances put back, by module, the module run most lately last. */
  readonly #ready = new Map<string, Instance[]>();
  #kept = 0;
  readonly #workersOnly = new Set<string>();
  readonly #capacity: number;

  constructor(capacity: number) {
    this.#capacity = capacity;
  }

  async run(task: RunTask, onLog: LogSink): Promise<WorkerOutcome | null> {
    if (this.#workersOnly.has(task.moduleHash)) return null;
    let ready = this.#ready.get(task.moduleHash)?.pop() ?? null;
    if (ready !== null) this.#kept--;
    ready ??= await instantiate(task.module, task.declaredImports, task.state).catch(() => null);
    // no instance could be made ahead of a run (its start function read the clock, logged or
    // trapped): every run needs one of its own, made where it runs; a worker makes it off this thread
    if (ready === null || ready.bindings.tainted || ready.snapshot === null) {
      this.#workersOnly.add(task.moduleHash);
      return null;
    }
    (ready.snapshot.exports[FUEL_EXPORT] as { value: bigint }).value = BigInt(INLINE_FUEL);
    const held: [Parameters<LogSink>[0], string][] = [];
    const { outcome, reusable } = await runModule(task, (level, message) => held.push([level, message]), ready);
    if (reusable !== null) this.#keep(task.moduleHash, reusable);
    if (outcome.kind !== 'done' && outcome.kind !== 'suspended') return null;
    for (const [level, message] of held) onLog(level, message);
    return outcome;
  }

  clear(): void {
    this.#ready.clear();
    this.#kept = 0;
  }

  /** Keeps an instance for its module's next run; past `capacity`, drops from the module run least lately. */
  #keep(hash: string, instance: Instance): void {
    const list = this.#ready.get(hash) ?? [];
    this.#ready.delete(hash);
    this.#ready.set(hash, [...list, instance]);
    this.#kept++;
    for (const [oldest, instances] of this.#ready) {
      if (this.#kept <= this.#capacity) break;
      instances.shift();
      this.#kept--;
      if (instances.length === 0) this.#ready.delete(oldest);
    }
  }
}
