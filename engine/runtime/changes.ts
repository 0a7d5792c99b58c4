import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Db } from '../store/db.ts';
import { asScheduler } from '../store/tx.ts';

type Listener = () => void;

/** A registration lapses this long after it was last renewed (a watcher that died unheard). */
const WATCH_MS = 60_000;
const RENEW_MS = WATCH_MS / 3;
/** The longest a first subscriber waits for writers older than the registration (see #register). */
const OLDER_WRITERS_MS = 1000;

/**
 * Fans the `flow_changes` NOTIFY (one per changed instance, payload its id; see migration 0009)
 * out to subscribers of that id, over one LISTEN connection however many pages watch. A
 * reconnect notifies '' and everyone hears it, since changes may have been missed meanwhile.
 *
 * Rows are notified only while some process is registered in `change_watchers` (migration 0013:
 * a NOTIFY on every step commit cost two commits a step and group commit), so this registers
 * while it has a subscriber and renews the registration, and lets it go when the last one leaves.
 */
export class Changes {
  readonly #byId = new Map<string, Set<Listener>>();
  readonly #watcher = randomUUID();
  #unlisten: Promise<() => Promise<void>> | null = null;
  /** Registered (or being registered) in change_watchers; null while nobody subscribes. */
  #watching: Promise<void> | null = null;
  #renew: NodeJS.Timeout | undefined;
  #renewedAt = 0;
  /** Registration writes run one after another: a late DELETE must not undo a newer INSERT. */
  #serial: Promise<unknown> = Promise.resolve();

  constructor(private readonly db: Db) {}

  /** Resolves once changes of `id` reach `listener`; call what it returns to leave (it resolves once the registration is let go). */
  async subscribe(id: string, listener: Listener): Promise<() => Promise<void>> {
    this.#unlisten ??= this.db.listen('flow_changes', (payload) => this.#notify(payload));
    await this.#unlisten;
    // counted in before the registration is awaited: a last subscriber leaving meanwhile must not unregister it
    const set = this.#byId.get(id) ?? new Set();
    set.add(listener);
    this.#byId.set(id, set);
    const unsubscribe = () => {
      set.delete(listener);
      if (set.size === 0 && this.#byId.get(id) === set) this.#byId.delete(id);
      return this.#byId.size === 0 && this.#watching !== null ? this.#unwatch() : Promise.resolve();
    };
    this.#watching ??= this.#register().catch((err) => {
      this.#watching = null;
      throw err;
    });
    try {
      await this.#watching;
    } catch (err) {
      void unsubscribe();
      throw err;
    }
    return unsubscribe;
  }

  #notify(id: string): void {
    const targets = id === '' ? [...this.#byId.values()] : [this.#byId.get(id) ?? new Set<Listener>()];
    for (const set of targets) for (const l of set) l();
  }

  /**
   * Registers, then waits for the transactions that were running when the registration
   * committed to end: one of them may have written a row before it could see the registration
   * (so it will not notify) and commit after the subscriber's first read. What CREATE INDEX
   * CONCURRENTLY does; bounded, so a long transaction elsewhere does not hold a page up.
   */
  async #register(): Promise<void> {
    await this.#write();
    const older = await this.db.pool.query<{ xmax: string }>('SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS xmax');
    const xmax = older.rows[0]!.xmax;
    for (let waited = 0; waited < OLDER_WRITERS_MS; waited += 5) {
      const r = await this.db.pool.query<{ over: boolean }>('SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint >= $1::bigint AS over', [xmax]);
      if (r.rows[0]!.over) break;
      await sleep(5);
    }
    clearInterval(this.#renew);
    this.#renew = setInterval(() => void this.#renewNow(), RENEW_MS).unref();
  }

  async #renewNow(): Promise<void> {
    const lapsed = Date.now() - this.#renewedAt > WATCH_MS;
    try {
      await this.#write();
      // changes in the gap were not notified: every subscriber looks again
      if (lapsed) this.#notify('');
    } catch {
      // the database is away: the next renewal tries again (the listener reconnects by itself)
    }
  }

  #write(): Promise<void> {
    return this.#inOrder(async () => {
      await asScheduler(this.db, (c) =>
        c.query(
          `INSERT INTO change_watchers (id, until) VALUES ($1, now() + $2::float8 * interval '1 millisecond')
           ON CONFLICT (id) DO UPDATE SET until = EXCLUDED.until`,
          [this.#watcher, WATCH_MS],
        ),
      );
      this.#renewedAt = Date.now();
    });
  }

  /** The last subscriber left: stop renewing and delete the registration (it lapses anyway). */
  #unwatch(): Promise<void> {
    clearInterval(this.#renew);
    this.#renew = undefined;
    this.#watching = null;
    return this.#inOrder(() => asScheduler(this.db, (c) => c.query('DELETE FROM change_watchers WHERE id = $1', [this.#watcher]))).then(
      () => {},
      () => {},
    );
  }

  #inOrder<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#serial.then(fn);
    this.#serial = next.catch(() => {});
    return next;
  }

  async close(): Promise<void> {
    const unlisten = this.#unlisten;
    this.#unlisten = null;
    this.#byId.clear();
    if (this.#watching !== null) await this.#unwatch();
    if (unlisten !== null) await (await unlisten)();
  }
}
