/**
 * A bound on work running at once, shared fairly between keys (the engine passes the env): at
 * most `size` runs of `run()` are inside their function together, and the rest wait in one line
 * per key, the lines served in turn as slots free, so one key's backlog delays another key's run
 * by at most one turn. A run cannot be cut short, so turns alone do not help when one key's runs
 * hold every slot for long (modules that spin until their timeout): a key that holds no slot runs
 * at once, over the bound. That overflow is bounded by the keys of the instances a pool holds.
 */
export class Slots {
  #free: number;
  /** Waiting runs per key; the Map's order is the order keys are served in (a served key moves last). */
  readonly #waiting = new Map<string, (() => void)[]>();
  readonly #held = new Map<string, number>();

  constructor(size: number) {
    this.#free = size;
  }

  async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    if (this.#free > 0) this.#free--;
    else if ((this.#held.get(key) ?? 0) === 0) this.#free--;
    else {
      await new Promise<void>((resolve) => {
        const line = this.#waiting.get(key);
        if (line === undefined) this.#waiting.set(key, [resolve]);
        else line.push(resolve);
      });
    }
    this.#held.set(key, (this.#held.get(key) ?? 0) + 1);
    try {
      return await fn();
    } finally {
      const held = this.#held.get(key)! - 1;
      if (held > 0) this.#held.set(key, held);
      else this.#held.delete(key);
      this.#release();
    }
  }

  /** Hands the freed slot straight to the next key in turn, so none is taken out of turn; else frees it. */
  #release(): void {
    this.#free++;
    if (this.#free <= 0) return; // an overflow run ended: the bound is not back yet
    const first = this.#waiting.entries().next();
    if (first.done === true) return;
    const [key, line] = first.value;
    this.#waiting.delete(key);
    const next = line.shift()!;
    if (line.length > 0) this.#waiting.set(key, line);
    this.#free--;
    next();
  }
}
