import { performance } from 'node:perf_hooks';
import { TERMINAL_STATES } from '../contracts/index.ts';
import type { TransitionObserver } from '../engine/runtime/observer.ts';

/**
 * Knows when instances end, and when each committed a transition, from the engine's own hooks:
 * waiting never queries the database, so the counts hold the engine's traffic only.
 */
export class Watch implements TransitionObserver {
  ended = 0;
  /** performance.now() of each committed transition, by instance (kept only when asked). */
  readonly commits = new Map<string, number[]>();
  #target = Number.POSITIVE_INFINITY;
  #done: (() => void) | null = null;
  #fail: ((err: unknown) => void) | null = null;
  constructor(private readonly keepTimes = false) {}

  onTransition: TransitionObserver['onTransition'] = (_from, t, committed) => {
    if (!committed) return;
    if (this.keepTimes) {
      const times = this.commits.get(t.instance.id) ?? [];
      times.push(performance.now());
      this.commits.set(t.instance.id, times);
    }
    if (!TERMINAL_STATES.has(t.instance.state)) return;
    if (t.instance.state !== 'completed') this.#fail?.(new Error(`bench workflow ended ${t.instance.state}`));
    if (++this.ended >= this.#target) this.#done?.();
  };

  onError: TransitionObserver['onError'] = (id, err) => this.#fail?.(new Error(`engine error (${id ?? 'poll loop'}): ${String(err)}`));

  /** The times between an instance's consecutive commits (ms, sorted): what each step took, end to end. */
  intervals(): number[] {
    const ms: number[] = [];
    for (const times of this.commits.values()) for (let i = 1; i < times.length; i++) ms.push(times[i]! - times[i - 1]!);
    return ms.sort((a, b) => a - b);
  }

  /** Resolves once `n` instances in all have ended. */
  until(n: number): Promise<void> {
    this.#target = n;
    return new Promise<void>((resolve, reject) => {
      this.#done = resolve;
      this.#fail = reject;
      if (this.ended >= n) resolve();
    });
  }
}
