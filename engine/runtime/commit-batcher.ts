import type pg from 'pg';
import { commitBatch, type CommitReceipt } from '../store/commit-batch.ts';
import { commitOne } from '../store/commit-transition.ts';
import { Batcher } from './batcher.ts';

export { IN_FLIGHT } from './batcher.ts';

interface Commit {
  /** commit_journaled()'s parameter, JSON. */
  param: string;
  /** It carries the permits of the instance's next attempt (migration 0037). */
  takesPermits: boolean;
}

/**
 * Puts the worker pool's single-statement commits of many instances into one statement, one
 * transaction and one WAL flush (migration 0012), through a Batcher. One instance's commits never
 * share or overtake each other: its worker waits for each receipt before it makes the next. Each
 * caller is answered only when its own row's statement has returned (committed or fenced): a
 * worker still runs its next effect only after its state is durable. A lost connection leaves each
 * row of a batch as unknown as a lone commit would; every caller gets the error, and its retry
 * asks for its own receipt (see WorkerPool #commit).
 */
export class CommitBatcher {
  readonly #batcher: Batcher<Commit, CommitReceipt>;

  constructor(pool: pg.Pool) {
    this.#batcher = new Batcher(pool, {
      many: (client, commits) =>
        commitBatch(
          client,
          commits.map((c) => c.param),
        ),
      // alone, and each commit of a batch that failed (a row that raised, a deadlock, limits that
      // looked slack and were not by the batch's end): one that takes permits has its limits'
      // buckets locked first, so the limit as it now stands decides
      one: (client, c) => (c.takesPermits ? commitBatch(client, [c.param], true).then(([r]) => r!) : commitOne(client, c.param).then((n) => ({ n, permits: null }))),
      // only commit_batch() takes permits, with room to spare unlocked
      alone: (c) => !c.takesPermits,
    });
  }

  /** Commits one transition (commit_journaled()'s parameter, JSON); answers its receipt. */
  commit = (param: string, takesPermits = false): Promise<CommitReceipt> => this.#batcher.send({ param, takesPermits });
}
