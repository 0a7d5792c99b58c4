import type { Db } from '../store/db.ts';

/**
 * Tells every node's claim loop (LISTEN flow_work) that work was committed for a claim to take,
 * after the commit, coalesced.
 *
 * A transaction that NOTIFYs holds Postgres's notify lock from its commit until it ends, its WAL
 * flush included, so such transactions commit one at a time. A start that notified in its own
 * statement made every start of a burst wait for the flush of the one before (1,000 starts/s at
 * 1 client or 64 alike on this box). Here a NOTIFY is a statement of its own, with nothing to
 * flush, sent once the start has committed. At most one is out at a time; starts committed while
 * one is out get one more after it, which is sent after each of their commits, so none of them can
 * be missed by the claims it wakes.
 *
 * A node that dies between a commit and its announce leaves that instance to the other nodes'
 * poll (`pollMs`), as any other lost wake-up.
 */
export class WorkAnnouncer {
  #out: Promise<void> | null = null;
  #again = false;

  constructor(
    private readonly db: Db,
    private readonly onError: (err: unknown) => void,
  ) {}

  announce(): void {
    if (this.#out !== null) {
      this.#again = true;
      return;
    }
    this.#again = false;
    this.#out = this.db.pool
      .query({ name: 'flow_announce_work', text: "SELECT pg_notify('flow_work', '')" })
      .then(
        () => {},
        (err: unknown) => this.onError(err),
      )
      .finally(() => {
        this.#out = null;
        if (this.#again) this.announce();
      });
  }

  /** Waits for what is out, and what it asked to follow it. */
  async drain(): Promise<void> {
    while (this.#out !== null) await this.#out;
  }
}
