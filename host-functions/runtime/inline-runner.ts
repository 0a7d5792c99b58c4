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
 * own run; this costs none. One instance per module (the last `capacity` modules run) is kept, put
 * back as it was made after each run. A module whose start function touches the host (a clock
 * read, a log) or traps needs a new instance for every run, so it runs on workers, which make them.
 *
 * Only a run that ends done or suspended counts; any other (out of fuel, a trap, a stack overflow
 * on this thread's smaller stack, a host memory limit) returns null and goes to a worker, whose
 * outcome is authoritative, as it was before runs went inline. The module is deterministic, so a
 * run's outcome does not depend on where it ran. Its log lines are held until the run counts, so
 * that a run made again on a worker does not log twice.
 */
export class InlineRunner {
  readonly #ready = new Map<string, Instance>();
  readonly #workersOnly = new Set<string>();
  readonly #capacity: number;

  constructor(capacity: number) {
    this.#capacity = capacity;
  }

  async run(task: RunTask, onLog: LogSink): Promise<WorkerOutcome | null> {
    if (this.#workersOnly.has(task.moduleHash)) return null;
    let ready = this.#ready.get(task.moduleHash) ?? null;
    this.#ready.delete(task.moduleHash);
    ready ??= await instantiate(task.module, task.declaredImports, task.state).catch(() => null);
    // no instance could be made ahead of a run (its start function read the clock, logged or
    // trapped): every run needs one of its own, made where it runs; a worker makes it off this thread
    if (ready === null || ready.bindings.tainted) {
      this.#workersOnly.add(task.moduleHash);
      return null;
    }
    const fuel = (await ready.plugin.getInstance('0')).exports[FUEL_EXPORT] as unknown as { value: bigint };
    fuel.value = BigInt(INLINE_FUEL);
    const held: [Parameters<LogSink>[0], string][] = [];
    const { outcome, reusable } = await runModule(task, (level, message) => held.push([level, message]), ready);
    if (reusable !== null) this.#keep(task.moduleHash, reusable);
    if (outcome.kind !== 'done' && outcome.kind !== 'suspended') return null;
    for (const [level, message] of held) onLog(level, message);
    return outcome;
  }

  clear(): void {
    this.#ready.clear();
  }

  #keep(hash: string, instance: Instance): void {
    this.#ready.set(hash, instance);
    for (const oldest of this.#ready.keys()) {
      if (this.#ready.size <= this.#capacity) break;
      this.#ready.delete(oldest);
    }
  }
}
