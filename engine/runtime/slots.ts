/**
 * A first-come, first-served bound on work running at once: at most `size` runs of `run()` are
 * inside their function together; the rest wait in the order they asked.
 */
export class Slots {
  #free: number;
  readonly #waiting: (() => void)[] = [];

  constructor(size: number) {
    this.#free = size;
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.#free > 0) this.#free--;
    else await new Promise<void>((resolve) => this.#waiting.push(resolve));
    try {
      return await fn();
    } finally {
      // hand the slot straight to the next in line, so none is taken out of turn
      const next = this.#waiting.shift();
      if (next === undefined) this.#free++;
      else next();
    }
  }
}
