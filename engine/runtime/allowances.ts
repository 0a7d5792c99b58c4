import type { Db } from '../store/db.ts';
import { keepAllowances, lendAllowance, type Loan, type PermitNeed, returnAllowances } from '../store/permits.ts';
import { asScheduler } from '../store/tx.ts';

/** How long a loan lasts unless kept; kept every sixth of it while held. (Default: 30 s) */
const TTL_MS = 30_000;
/** After a bucket refused to lend, how long before it is asked again. */
const REFUSED_MS = 1000;

/** The room an attempt took from this engine's loans; released once its call has ended. */
export interface Allotment {
  release(): void;
}

interface Held extends Loan {
  bucket: string;
  /** Attempts with a slot of it now. */
  inUse: number;
  /** Tokens handed out. */
  spent: number;
  /** Handed out since the last upkeep: an idle loan goes back. */
  used: boolean;
  /** False once revoked, spent, idle or lapsed: it hands out nothing more, and goes back when its calls end. */
  open: boolean;
  /**
   * When it lapses by this engine's clock (`performance.now()`): its TTL counted from before the
   * statement that granted or last kept it, so never after Postgres's own expiry. An engine cut off
   * from Postgres cannot keep its loans; past this it stops handing them out, before the sweep
   * gives their room to another engine.
   */
  until: number;
}

const bucketOf = (n: PermitNeed) => `${n.scope}\u0000${n.resource}\u0000${n.key}`;

/**
 * Room lent to this engine by the buckets of limits far from reached (migration 0053): an attempt
 * whose every permit such a loan covers takes it here, with no statement, where it would otherwise
 * take its permits in its commit batch. Only a handler's limit is lent (not a per-key one, not a
 * workflow's), and only one loose enough for the loan to be a small part of it: a cap of at least
 * 4 loans' slots, a burst of at least 4 loans' tokens. What Postgres lends, it counts as taken
 * wherever it counts room, so the limits hold across engines as strictly as without loans.
 */
export class Allowances {
  readonly #current = new Map<string, Held>();
  readonly #closed = new Set<Held>();
  readonly #asking = new Set<string>();
  readonly #refusedUntil = new Map<string, number>();
  #timer: NodeJS.Timeout | null = null;
  #stopped = true;

  constructor(
    private readonly db: Db,
    /** Slots asked for a loan: the most instances this engine's worker pool holds at once. */
    private readonly slots: number,
    private readonly onError: (err: unknown) => void,
    private readonly ttlMs = TTL_MS,
  ) {}

  start(): void {
    this.#stopped = false;
    this.#timer = setInterval(() => void this.#upkeep().catch(this.onError), this.ttlMs / 6);
    this.#timer.unref();
  }

  /** Stops lending and gives every loan back (the worker pool has no attempt in flight by now). */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    const ids = [...this.#current.values(), ...this.#closed].map((h) => h.id);
    this.#current.clear();
    this.#closed.clear();
    if (ids.length > 0) await asScheduler(this.db, (c) => returnAllowances(c, ids));
  }

  /** The room for one attempt with these needs, from this engine's loans; null where any is not covered (then it asks for the missing ones). */
  allot(needs: readonly PermitNeed[]): Allotment | null {
    if (needs.length === 0 || this.#stopped) return null;
    const taken: Held[] = [];
    let covered = true;
    for (const n of needs) {
      const held = this.#current.get(bucketOf(n));
      if (held !== undefined && held.until <= performance.now()) this.#close(held);
      if (held?.open && (held.slots === null || held.inUse < held.slots) && (held.tokens === null || held.spent < held.tokens)) taken.push(held);
      else covered = false;
    }
    if (!covered) {
      if (needs.every((n) => this.#lendable(n))) for (const n of needs) this.#ask(n);
      return null;
    }
    for (const held of taken) {
      held.inUse++;
      held.used = true;
      if (held.tokens !== null && ++held.spent >= held.tokens) this.#close(held);
    }
    // the next loan asked for before this one is spent, so that it comes before it is needed
    for (const [i, held] of taken.entries()) if (held.tokens !== null && held.spent >= 0.75 * held.tokens) this.#ask(needs[i]!, true);
    let open = true;
    return {
      release: () => {
        if (!open) return;
        open = false;
        for (const held of taken) {
          held.inUse--;
          if (!held.open && held.inUse === 0) this.#giveBack([held]);
        }
      },
    };
  }

  /** Stops handing out the loans of a resource in a scope (all with none given): a limit changed, or someone waits for it. */
  revoke(scope?: string, resource?: string): void {
    for (const held of this.#current.values()) {
      const [s, r] = held.bucket.split('\u0000');
      if ((scope === undefined || s === scope) && (resource === undefined || r === resource)) this.#close(held);
    }
  }

  #lendable(n: PermitNeed): boolean {
    if (n.workflowWide || n.key !== '' || !n.resource.startsWith('handler:')) return false;
    if (n.concurrency !== null && n.concurrency < 4 * this.slots) return false;
    return n.rate === null || this.#tokens(n) >= 8;
  }

  /** Tokens asked for at once: half a second of the rate, at most a quarter of the burst (fewer than 8: nothing is asked). */
  #tokens(n: PermitNeed): number {
    return Math.floor(Math.min((n.burst ?? 1) / 4, (n.rate ?? 0) / 2));
  }

  #ask(n: PermitNeed, early = false): void {
    const bucket = bucketOf(n);
    if ((!early && this.#current.get(bucket)?.open) || this.#asking.has(bucket) || (this.#refusedUntil.get(bucket) ?? 0) > Date.now()) return;
    this.#asking.add(bucket);
    const tokens = n.rate === null ? 1 : this.#tokens(n);
    const until = performance.now() + this.ttlMs;
    asScheduler(this.db, (c) => lendAllowance(c, { need: n, slots: this.slots, tokens, ttlMs: this.ttlMs }))
      .then(
        (loan) => {
          if (loan === null) this.#refusedUntil.set(bucket, Date.now() + REFUSED_MS);
          else if (this.#stopped) this.#giveBack([{ ...loan, bucket, inUse: 0, spent: 0, used: false, open: false, until }]);
          else {
            const before = this.#current.get(bucket);
            if (before !== undefined) this.#close(before);
            this.#current.set(bucket, { ...loan, bucket, inUse: 0, spent: 0, used: false, open: true, until });
          }
        },
        (err) => {
          this.#refusedUntil.set(bucket, Date.now() + REFUSED_MS);
          this.onError(err);
        },
      )
      .finally(() => this.#asking.delete(bucket));
  }

  #close(held: Held): void {
    held.open = false;
    if (this.#current.get(held.bucket) === held) this.#current.delete(held.bucket);
    if (held.inUse === 0) this.#giveBack([held]);
    else this.#closed.add(held);
  }

  #giveBack(gone: Held[]): void {
    for (const held of gone) this.#closed.delete(held);
    void asScheduler(this.db, (c) => returnAllowances(c, gone.map((h) => h.id))).catch(this.onError);
  }

  /** Idle loans go back; the others are kept another TTL, except those lent before their limit changed. */
  async #upkeep(): Promise<void> {
    for (const held of [...this.#current.values()]) {
      if (!held.used && held.inUse === 0) this.#close(held);
      held.used = false;
    }
    const kept = [...this.#current.values(), ...this.#closed];
    if (kept.length === 0) return;
    const until = performance.now() + this.ttlMs;
    const alive = await asScheduler(this.db, (c) => keepAllowances(c, kept.map((h) => h.id), this.ttlMs));
    for (const held of kept) {
      if (alive.has(held.id)) held.until = until;
      else if (held.open) this.#close(held);
    }
  }
}
