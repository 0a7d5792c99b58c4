import type pg from 'pg';

/** Items a batch holds at most: a bound on one statement's parameter and on its locks. */
export const MAX_BATCH = 64;

/**
 * Batches out at once. A batch runs on one Postgres backend, so with one out Postgres used at most
 * one core for the statements of every caller; with two, the next batch runs while the one
 * before it waits for its WAL flush or its answer's trip back (docs/performance.md).
 */
export const IN_FLIGHT = 2;

/** How a batcher sends its items: together, and one by one. */
export interface BatchStatements<T, R> {
  /** Many items in one statement (one transaction): an answer for each, in their order. */
  many(client: pg.PoolClient, items: readonly T[]): Promise<R[]>;
  /** One item in a statement of its own: an item alone, and each item of a batch that failed. */
  one(client: pg.PoolClient, item: T): Promise<R>;
  /** Whether an item that finds no other waiting may go out through `one`. (Default: yes) */
  alone?(item: T): boolean;
}

interface Waiting<T, R> {
  item: T;
  resolve: (r: R) => void;
  reject: (err: unknown) => void;
}

/**
 * Puts many callers' single statements into one statement, one transaction and one WAL flush.
 * Batching is natural, with no timer: while fewer than IN_FLIGHT batches are out an item is sent
 * at once — so a caller alone pays nothing — and the items that arrive while they are out are sent
 * together when one returns. The more callers at once, the larger the batches.
 *
 * Each caller is answered only when its own item's statement has returned. A batch is one
 * transaction: a statement error (a row that raised, a deadlock) rolls all of it back, and each of
 * its items is sent again alone, so only a bad one fails. On the same connection: if it was lost,
 * the batch may have landed, and each caller gets the error (commits ask for their receipts on
 * retry). On PGlite, one session behind a one-client pool, there is no second connection anyway.
 */
export class Batcher<T, R> {
  readonly #waiting: Waiting<T, R>[] = [];
  /** Batches out now (at most IN_FLIGHT). */
  #sending = 0;

  constructor(
    private readonly pool: pg.Pool,
    private readonly statements: BatchStatements<T, R>,
  ) {}

  /** Sends `item`, alone or in a batch; answers its own answer. */
  send = (item: T): Promise<R> =>
    new Promise((resolve, reject) => {
      this.#waiting.push({ item, resolve, reject });
      if (this.#sending < IN_FLIGHT) void this.#send();
    });

  async #send(): Promise<void> {
    this.#sending++;
    while (this.#waiting.length > 0) await this.#sendBatch(this.#waiting.splice(0, MAX_BATCH));
    this.#sending--;
  }

  /** Never throws: every caller of the batch is answered, with its answer or an error. */
  async #sendBatch(batch: Waiting<T, R>[]): Promise<void> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      for (const w of batch) w.reject(err);
      return;
    }
    // held, not pool.query(): a statement error keeps the connection (pool.query would drop it,
    // and on PGlite, one session behind a one-client pool, a dropped client breaks the next)
    try {
      if (batch.length === 1 && (this.statements.alone?.(batch[0]!.item) ?? true)) return await this.#one(client, batch[0]!);
      const answers = await this.statements.many(
        client,
        batch.map((w) => w.item),
      );
      for (const [i, w] of batch.entries()) w.resolve(answers[i]!);
    } catch {
      for (const w of batch) await this.#one(client, w);
    } finally {
      client.release();
    }
  }

  #one(client: pg.PoolClient, w: Waiting<T, R>): Promise<void> {
    return this.statements.one(client, w.item).then(w.resolve, w.reject);
  }
}
