import pg from 'pg';

/** What a statement is, for counting: its prepared name, or its first words. */
function label(q: unknown): string {
  const text = typeof q === 'string' ? q : ((q as { name?: string; text?: string }).name ?? (q as { text?: string }).text ?? '?');
  return text.replace(/\s+/g, ' ').trim().slice(0, 60);
}

/**
 * Counts the transactions this process sends, by what they are: a statement outside BEGIN …
 * COMMIT is a transaction of its own; a BEGIN … COMMIT block counts once, under the label of its
 * first statement after BEGIN. Every query goes through Client.prototype.query (the pool's too),
 * which `install()` wraps; only what is sent while `counting` is set is counted.
 */
export class SentTransactions {
  readonly tx = new Map<string, number>();
  readonly statements = new Map<string, number>();
  counting = false;
  readonly #open = new WeakMap<object, string | null>();

  install(): void {
    const original = pg.Client.prototype.query as (...args: unknown[]) => unknown;
    const self = this;
    (pg.Client.prototype as unknown as { query: unknown }).query = function (this: object, ...args: unknown[]) {
      if (self.counting) self.#see(this, label(args[0]));
      return original.apply(this, args);
    };
  }

  /** Forgets what was counted (between the cases of one run). */
  reset(): void {
    this.tx.clear();
    this.statements.clear();
  }

  total(): number {
    return [...this.tx.values()].reduce((a, b) => a + b, 0);
  }

  #see(client: object, l: string): void {
    this.statements.set(l, (this.statements.get(l) ?? 0) + 1);
    if (/^BEGIN/i.test(l)) return void this.#open.set(client, null);
    if (/^(COMMIT|ROLLBACK)/i.test(l)) {
      const first = this.#open.get(client);
      this.#open.delete(client);
      const key = `BEGIN … ${first ?? '(empty)'} … ${l}`;
      return void this.tx.set(key, (this.tx.get(key) ?? 0) + 1);
    }
    if (this.#open.has(client)) {
      if (this.#open.get(client) === null) this.#open.set(client, l);
      return;
    }
    this.tx.set(l, (this.tx.get(l) ?? 0) + 1);
  }
}
