import { heartbeat } from '../store/claim-workflows.ts';
import type { Db } from '../store/db.ts';
import { asScheduler } from '../store/tx.ts';
import type { TransitionObserver } from './observer.ts';

/**
 * Keeps a claimed instance's lease alive for as long as its worker drives it — while an attempt
 * runs, and while a commit is retried after a lost connection — and acts on what the heartbeat
 * finds. A lease found taken aborts `signal` (the attempt's call is dropped: nobody will commit
 * its answer) and tells the observer; a heartbeat that fails is reported, and the next one tries
 * again. While a commit is in flight a missing lease is not a loss: a commit that hands the
 * instance over clears the token itself, and whether the commit landed is for the commit to say.
 */
export class LeaseKeeper {
  readonly #abort = new AbortController();
  readonly #timer: NodeJS.Timeout;
  #committing = false;
  #beating = false;
  #stopped = false;

  constructor(
    private readonly db: Db,
    private readonly id: string,
    private readonly token: string,
    private readonly leaseMs: number,
    private readonly observer: TransitionObserver,
  ) {
    this.#timer = setInterval(() => void this.#beat(), Math.max(50, Math.floor(leaseMs / 3)));
  }

  /** Aborted once the lease is known lost. */
  get signal(): AbortSignal {
    return this.#abort.signal;
  }

  get lost(): boolean {
    return this.#abort.signal.aborted;
  }

  /** Runs a commit (with its retries) under heartbeats whose "lease missing" is not acted on. */
  async committing<T>(fn: () => Promise<T>): Promise<T> {
    this.#committing = true;
    try {
      return await fn();
    } finally {
      this.#committing = false;
    }
  }

  stop(): void {
    this.#stopped = true;
    clearInterval(this.#timer);
  }

  async #beat(): Promise<void> {
    if (this.#beating || this.#stopped || this.lost) return; // one at a time: a slow database is not hurried
    this.#beating = true;
    try {
      const held = await asScheduler(this.db, (c) => heartbeat(c, { id: this.id, token: this.token, leaseMs: this.leaseMs }));
      if (!held && !this.#committing && !this.#stopped) {
        this.#abort.abort(new Error(`the lease on workflow ${this.id} was taken by another worker`));
        this.observer.onLeaseLost?.(this.id);
      }
    } catch (err) {
      if (!this.#stopped) this.observer.onError?.(this.id, err);
    } finally {
      this.#beating = false;
    }
  }
}
