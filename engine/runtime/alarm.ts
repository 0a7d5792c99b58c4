/**
 * Wakes loops from their sleep: the claim loop and `drain()` of the worker pool, its timer loop,
 * the outbox relay. One ring wakes every loop sleeping on it. Each loop sleeps through its own
 * `Waiter`, which remembers the rings it has seen: a ring that came while that loop was busy is
 * kept for it — its next sleep returns at once, since whatever rang may have come too late for
 * the look it was taking — however many other loops sleep on the same alarm meanwhile.
 */
export class Alarm {
  #rings = 0;
  readonly #sleepers = new Set<() => void>();

  ring(): void {
    this.#rings++;
    for (const wake of [...this.#sleepers]) wake();
  }

  /** A loop's handle on the alarm; rings before it was made are not its concern. */
  waiter(): Waiter {
    let seen = this.#rings;
    return {
      sleep: async (ms) => {
        if (this.#rings === seen) await this.#nap(ms);
        seen = this.#rings;
      },
    };
  }

  #nap(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.#sleepers.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.#sleepers.add(wake);
    });
  }
}

export interface Waiter {
  /** Sleeps `ms`, or until a ring; returns at once if rung since this waiter last woke. */
  sleep(ms: number): Promise<void>;
}
