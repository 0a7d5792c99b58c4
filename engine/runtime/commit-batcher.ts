import type pg from 'pg';
import { commitBatch, type CommitReceipt } from '../store/commit-batch.ts';
import { commitOne } from '../store/commit-transition.ts';

/** Rows a batch holds at most: a bound on one statement's parameter and on its locks. */
const MAX_BATCH = 64;

/**
 * Batches out at once. A batch runs on one Postgres backend, so with one out Postgres used at most
 * one core for the commits of every instance in flight; with two, the next batch runs while the
 * one before it waits for its WAL flush or its answer's trip back (docs/performance.md).
 */
export const IN_FLIGHT = 2;

interface Waiting {
  param: string;
  /** It carries the permits of the instance's next attempt (migration 0037). */
  takesPermits: boolean;
  resolve: (r: CommitReceipt) => void;
  reject: (err: unknown) => void;
}

/**
 * Puts the worker pool's single-statement commits of many instances into one statement, one
 * transaction and one WAL flush (migration 0012). Batching is natural, with no timer: while fewer
 * than IN_FLIGHT batches are out a commit is sent at once — so a workflow alone pays nothing —
 * and the commits that arrive while they are out are sent together when one returns. The more
 * instances in flight, the larger the batches. One instance's commits never share or overtake
 * each other: its worker waits for each receipt before it makes the next.
 *
 * Each caller is answered only when its own row's statement has returned (committed or fenced):
 * a worker still runs its next effect only after its state is durable. A batch is one
 * transaction, so a lost connection leaves each of its rows as unknown as a lone commit would;
 * every caller gets the error, and its retry asks for its own receipt (see WorkerPool #commit).
 */
export class CommitBatcher {
  readonly #waiting: Waiting[] = [];
  /** Batches out now (at most IN_FLIGHT). */
  #sending = 0;

  constructor(private readonly pool: pg.Pool) {}

  /** Commits one transition (commit_journaled()'s parameter, JSON); answers its receipt. */
  commit = (param: string, takesPermits = false): Promise<CommitReceipt> =>
    new Promise((resolve, reject) => {
      this.#waiting.push({ param, takesPermits, resolve, reject });
      if (this.#sending < IN_FLIGHT) void this.#send();
    });

  async #send(): Promise<void> {
    this.#sending++;
    while (this.#waiting.length > 0) await this.#sendBatch(this.#waiting.splice(0, MAX_BATCH));
    this.#sending--;
  }

  /** Never throws: every caller of the batch is answered, with its count or an error. */
  async #sendBatch(batch: Waiting[]): Promise<void> {
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
      if (batch.length === 1 && !batch[0]!.takesPermits) return await alone(client, batch[0]!);
      const ns = await commitBatch(client, batch.map((w) => w.param));
      for (const [i, w] of batch.entries()) w.resolve(ns[i]!);
    } catch {
      // A statement error (a row that raised, a deadlock, limits that looked slack and were not
      // by the batch's end) rolled the whole batch back: commit each row on its own, its limits'
      // buckets locked first, so only a bad row fails. On the same connection: if it was lost,
      // the batch may have landed, and a fresh one would answer its rows "fenced" (their guards
      // moved); the lost one answers each row with the error, and each worker's retry finds its
      // receipt. (PGlite's pool has no second connection to offer anyway.)
      for (const w of batch) await alone(client, w);
    } finally {
      client.release();
    }
  }
}

/** One commit in a statement of its own: commit_batch() of one, buckets locked first, where it takes permits (only it can). */
async function alone(client: pg.PoolClient, w: Waiting): Promise<void> {
  const sent = w.takesPermits ? commitBatch(client, [w.param], true).then(([r]) => r!) : commitOne(client, w.param).then((n) => ({ n, permits: null }));
  await sent.then(w.resolve, w.reject);
}
