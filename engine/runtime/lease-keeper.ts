import { heartbeats } from '../store/claim-workflows.ts';
import type { Db } from '../store/db.ts';
import { asScheduler } from '../store/tx.ts';
import type { Instance } from '../core/instance.ts';
import type { TransitionObserver } from './observer.ts';

/**
 * The heartbeats of one worker pool: every lease it holds is extended by one statement every
 * leaseMs / 3, so heartbeat traffic follows the pool, not the number of instances in flight
 * (64 instances on long calls made 64 write transactions each beat). A lease is first
 * beaten at most leaseMs / 3 after it was taken, as when each instance kept its own timer.
 */
export class Heartbeats {
  readonly #held = new Set<LeaseKeeper>();
  #timer: NodeJS.Timeout | undefined;
  #beating = false;

  constructor(
    private readonly db: Db,
    private readonly leaseMs: number,
    private readonly observer: TransitionObserver,
  ) {}

  /** Keeps the lease `token` on instance `id` alive until the keeper is stopped. */
  keep(id: string, token: string, held?: Instance): LeaseKeeper {
    const keeper = new LeaseKeeper(id, token, this.observer, held, () => {
      this.#held.delete(keeper);
      if (this.#held.size === 0) {
        clearInterval(this.#timer);
        this.#timer = undefined;
      }
    });
    this.#held.add(keeper);
    this.#timer ??= setInterval(() => void this.#beat(), Math.max(50, Math.floor(this.leaseMs / 3)));
    return keeper;
  }

  /**
   * A notice from Postgres (migration 0018): `<id>:<token>` had its lease taken by someone else's
   * commit, just now. The holder stops before it runs anything more for the instance. '' means
   * notices may have been lost (the listening connection came back): a heartbeat now finds out.
   */
  taken(notice: string): void {
    if (notice === '') {
      void this.#beat();
      return;
    }
    const [id, token] = notice.split(':');
    for (const k of this.#held) if (k.id === id && k.token === token) k.taken();
  }

  async #beat(): Promise<void> {
    if (this.#beating) return; // one at a time: a slow database is not hurried
    const batch = [...this.#held].filter((k) => !k.lost);
    if (batch.length === 0) return;
    this.#beating = true;
    try {
      const lost = await asScheduler(this.db, (c) =>
        heartbeats(c, { ids: batch.map((k) => k.id), tokens: batch.map((k) => k.token), leaseMs: this.leaseMs }),
      );
      for (const k of batch) if (lost.has(k.id)) k.missing();
    } catch (err) {
      for (const k of batch) k.failed(err);
    } finally {
      this.#beating = false;
    }
  }
}

/**
 * One claimed instance's lease, kept alive by the pool's heartbeats for as long as its worker
 * drives it — while an attempt runs, and while a commit is retried after a lost connection — and
 * what the heartbeat finds. A lease found taken aborts `signal` (the attempt's call is dropped:
 * nobody will commit its answer) and tells the observer; a heartbeat that fails is reported, and
 * the next one tries again. While a commit is in flight a missing lease is not a loss: a commit
 * that hands the instance over clears the token itself, and whether the commit landed is for the
 * commit to say.
 */
export class LeaseKeeper {
  readonly #abort = new AbortController();
  #committing = false;
  #stopped = false;

  constructor(
    readonly id: string,
    readonly token: string,
    private readonly observer: TransitionObserver,
    private held: Instance | undefined,
    private readonly onStop: () => void,
  ) {}

  /** The instance as its holder last committed it, for what a lost lease is reported with (its step). */
  holding(instance: Instance): void {
    this.held = instance;
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
    if (this.#stopped) return;
    this.#stopped = true;
    this.onStop();
  }

  /** The heartbeat found the lease taken (while a commit is in flight, that commit is what says so). */
  missing(): void {
    if (!this.#committing) this.taken();
  }

  /** Another's commit took the lease (a notice, migration 0018): stop, whatever this worker is doing. */
  taken(): void {
    if (this.#stopped || this.lost) return;
    this.#abort.abort(new Error(`the lease on workflow ${this.id} was taken by another worker`));
    this.observer.onLeaseLost?.(this.id, this.held);
  }

  /** The heartbeat failed. */
  failed(err: unknown): void {
    if (!this.#stopped) this.observer.onError?.(this.id, err);
  }
}
