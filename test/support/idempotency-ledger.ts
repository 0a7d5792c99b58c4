/** What the owning service knows about one call it received. */
export interface DeliveryInfo {
  key: string;
  attempt: number;
  /** The operation called (a proxy path, a func export). */
  op: string;
  workflowId: string;
  /** Who sent it: a worker process, an engine. */
  via: string;
  kind: 'step' | 'compensation';
  /** When it arrived (ms since the epoch), where the sender records it. */
  at?: number;
}

export interface Delivery extends DeliveryInfo {
  /** Arrival order, from 0. */
  n: number;
  /** `applied`: first success for the key; `replayed`: the stored answer; otherwise no effect took place. */
  outcome: 'applied' | 'replayed' | 'refused' | 'transient' | 'dropped';
  /** Set when the store already held a committed success for this key as the call arrived. */
  afterCommit: boolean;
}

/**
 * The idempotency ledger of an owning service, the way a real one keeps it: the first successful
 * answer per Idempotency-Key is stored and replayed for every later call with that key, so an
 * effect is applied once however often the engine delivers it. Failures store nothing: the next
 * delivery tries again. `applications` counts how often an effect really took place.
 */
export class IdempotencyLedger<R> {
  readonly deliveries: Delivery[] = [];
  readonly applications = new Map<string, number>();
  readonly #stored = new Map<string, R>();

  constructor(private readonly classify: (result: R) => 'success' | 'transient' | 'refused') {}

  /** Records a delivery and answers it; `apply` runs (synchronously, so per key atomically) only if no success is stored. */
  deliver(info: DeliveryInfo, apply: () => R, opts: { afterCommit?: boolean } = {}): { result: R; delivery: Delivery } {
    const stored = this.#stored.get(info.key);
    let result: R;
    let outcome: Delivery['outcome'];
    if (stored !== undefined) {
      result = stored;
      outcome = 'replayed';
    } else {
      result = apply();
      const cls = this.classify(result);
      if (cls === 'success') {
        this.#stored.set(info.key, result);
        this.applications.set(info.key, (this.applications.get(info.key) ?? 0) + 1);
        outcome = 'applied';
      } else {
        outcome = cls;
      }
    }
    const delivery: Delivery = { ...info, n: this.deliveries.length, outcome, afterCommit: opts.afterCommit ?? false };
    this.deliveries.push(delivery);
    return { result, delivery };
  }

  /** A call that reached the service but was dropped before it took effect (its sender died). */
  drop(info: DeliveryInfo, opts: { afterCommit?: boolean } = {}): Delivery {
    const delivery: Delivery = { ...info, n: this.deliveries.length, outcome: 'dropped', afterCommit: opts.afterCommit ?? false };
    this.deliveries.push(delivery);
    return delivery;
  }

  appliedKeys(): Set<string> {
    return new Set(this.applications.keys());
  }

  /** Deliveries per `key#attempt`. */
  perAttempt(): Map<string, number> {
    const out = new Map<string, number>();
    for (const d of this.deliveries) out.set(`${d.key}#${d.attempt}`, (out.get(`${d.key}#${d.attempt}`) ?? 0) + 1);
    return out;
  }

  count(outcome: Delivery['outcome']): number {
    return this.deliveries.filter((d) => d.outcome === outcome).length;
  }
}

/** A held call: `arrived` resolves when a matching call comes in; `release` lets it go on. */
export interface Hold<T> {
  arrived: Promise<T>;
  release(): void;
}

/**
 * One-shot gates for calls: the test arms a gate with a predicate; the first call that matches
 * waits at it until the test releases it. Used to stop a worker between execute and commit.
 */
export class Gates<T> {
  #armed: { match: (info: T) => boolean; arrive: (info: T) => void; released: Promise<void> }[] = [];
  #open: (() => void)[] = [];

  hold(match: (info: T) => boolean): Hold<T> {
    let arrive!: (info: T) => void;
    let release!: () => void;
    const arrived = new Promise<T>((r) => {
      arrive = r;
    });
    const released = new Promise<void>((r) => {
      release = r;
    });
    this.#armed.push({ match, arrive, released });
    this.#open.push(release);
    return { arrived, release };
  }

  /** Resolves at once unless an armed gate matches `info`; then when that gate is released. */
  async pass(info: T): Promise<boolean> {
    const i = this.#armed.findIndex((g) => g.match(info));
    if (i < 0) return false;
    const [gate] = this.#armed.splice(i, 1);
    gate!.arrive(info);
    await gate!.released;
    return true;
  }

  /** Disarms every gate and releases every held call (for cleanup). */
  releaseAll(): void {
    this.#armed = [];
    for (const r of this.#open) r();
  }
}

/** The kind of call an idempotency key belongs to (ARCHITECTURE.md, Invariants: idempotency keys). */
export function kindOfKey(key: string): 'step' | 'compensation' {
  return key.endsWith(':compensate') ? 'compensation' : 'step';
}
