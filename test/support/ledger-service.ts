import { setTimeout as sleep } from 'node:timers/promises';
import { FakeService, type Received, type Reply } from './fake-service.ts';
import { type Delivery, type DeliveryInfo, IdempotencyLedger, kindOfKey } from './idempotency-ledger.ts';

/** Computes an answer the first time a key is called with success; never called for a stored key. */
export type Operation = (body: unknown, info: DeliveryInfo) => Reply;

/**
 * Where an intercepted call stops: `before-effect` holds it unapplied and drops it on release (as
 * if its sender died before calling), `after-effect` applies it and holds the answer, `after-reply`
 * applies and answers it and then reports.
 */
export type InterceptMode = 'before-effect' | 'after-effect' | 'after-reply';

export interface Interception {
  arrived: Promise<Delivery>;
  release(): void;
  /** Takes the interception back if no call matched yet; true when it did. */
  disarm(): boolean;
}

export interface LedgerServiceOptions {
  operations: Record<string, Operation>;
  /** Extra time before each answer, to spread calls out. (Default: none) */
  latencyMs?: () => number;
  /** Asked as each call arrives: did the store already commit this key's success? */
  committed?: (info: DeliveryInfo) => Promise<boolean>;
}

function classify(reply: Reply): 'success' | 'transient' | 'refused' {
  if (reply.status >= 200 && reply.status < 300) return 'success';
  return reply.status === 408 || reply.status === 429 || reply.status >= 500 ? 'transient' : 'refused';
}

/**
 * An idempotent owning service on loopback for engine processes: every operation is mounted
 * under a prefix per sender (`/w3.1/reserve`), so the test knows which worker process made each
 * call, and every call goes through the idempotency ledger.
 */
export class LedgerService {
  readonly ledger = new IdempotencyLedger<Reply>(classify);
  readonly fake = new FakeService();
  #intercepts: { match: (i: DeliveryInfo) => boolean; mode: InterceptMode; arrive: (d: Delivery) => void; released: Promise<void> }[] = [];
  #releases: (() => void)[] = [];
  #mounted = new Set<string>();

  constructor(private readonly opts: LedgerServiceOptions) {}

  async listen(): Promise<this> {
    await this.fake.listen();
    return this;
  }

  get url(): string {
    return this.fake.url;
  }

  /** Mounts every operation under `prefix` (e.g. `/w1.0`) and returns the handler URL for it. */
  mount(prefix: string): string {
    if (!this.#mounted.has(prefix)) {
      this.#mounted.add(prefix);
      for (const [path, op] of Object.entries(this.opts.operations)) {
        this.fake.on(`${prefix}${path}`, (req) => this.#handle(prefix, path, op, req));
      }
    }
    return `${this.url}${prefix}`;
  }

  /** Arms a one-shot interception for the first call matching `match`. */
  intercept(match: (info: DeliveryInfo) => boolean, mode: InterceptMode): Interception {
    let arrive!: (d: Delivery) => void;
    let release!: () => void;
    const arrived = new Promise<Delivery>((r) => {
      arrive = r;
    });
    const released = new Promise<void>((r) => {
      release = r;
    });
    const entry = { match, mode, arrive, released };
    this.#intercepts.push(entry);
    this.#releases.push(release);
    const disarm = () => {
      const i = this.#intercepts.indexOf(entry);
      if (i >= 0) this.#intercepts.splice(i, 1);
      return i >= 0;
    };
    return { arrived, release, disarm };
  }

  /** Disarms interceptions and lets every held call go (cleanup). */
  releaseAll(): void {
    this.#intercepts = [];
    for (const r of this.#releases) r();
  }

  async close(): Promise<void> {
    this.releaseAll();
    await this.fake.close();
  }

  async #handle(prefix: string, path: string, op: Operation, req: Received): Promise<Reply> {
    const key = req.headers['idempotency-key'] ?? '';
    const info: DeliveryInfo = {
      key,
      attempt: Number(req.headers['x-flow-attempt']),
      op: path,
      workflowId: req.headers['x-flow-workflow-id'] ?? '',
      via: prefix,
      kind: kindOfKey(key),
      at: Date.now(),
    };
    // asked before anything else happens, so the answer describes the moment of arrival
    const afterCommit = (await this.opts.committed?.(info)) ?? false;
    const i = this.#intercepts.findIndex((x) => x.match(info));
    const hold = i < 0 ? undefined : this.#intercepts.splice(i, 1)[0]!;
    if (hold?.mode === 'before-effect') {
      const delivery = this.ledger.drop(info, { afterCommit });
      hold.arrive(delivery);
      await hold.released;
      return { status: 503, body: { message: 'dropped by the test' } };
    }
    const { result, delivery } = this.ledger.deliver(info, () => op(req.body, info), { afterCommit });
    if (hold?.mode === 'after-effect') {
      hold.arrive(delivery);
      await hold.released;
    } else {
      const ms = this.opts.latencyMs?.() ?? 0;
      if (ms > 0) await sleep(ms);
      hold?.arrive(delivery);
    }
    return result;
  }
}
