import type { StepOutcome } from '../../contracts/index.ts';
import { backoffMs } from '../core/retry.ts';
import { hostAllowed, pinnedLookup, type Resolve, systemResolve } from '../executors/allowlist.ts';
import { callHttp } from '../executors/http-call.ts';
import type { Db } from '../store/db.ts';
import { claimDueOutbox, type DeliveryResult, type OutboxRow, recordDelivery } from '../store/outbox.ts';
import { asScheduler } from '../store/tx.ts';
import { Alarm } from './alarm.ts';
import { signOutbox } from './outbox-signature.ts';

export interface RelayTuning {
  /** Rows claimed, and delivered concurrently, per round. (Default: 16) */
  batch?: number;
  /** Per delivery. (Default: 10000) */
  timeoutMs?: number;
  /** Longest sleep between rounds when no NOTIFY wakes the relay earlier. (Default: 1000) */
  pollMs?: number;
  /** Backoff between attempts of one row: exponential, capped, with jitter. */
  backoff?: { initialMs?: number; factor?: number; maxMs?: number };
  /** Attempts before a transiently failing row is given up (failed_at). (Default: 30) */
  maxAttempts?: number;
  /** How a callback's hostname is resolved before its address is checked (allowlist.ts, `pinnedLookup`). (Default: dns.lookup) */
  resolve?: Resolve;
}

export interface OutboxRelayOptions extends RelayTuning {
  /** Key of the HMAC in X-Flow-Signature. */
  secret: string;
  /** Where `event` rows are POSTed; without one they stay undelivered until a sink is configured. */
  eventSink: { url: string } | null;
  /**
   * Hosts a `callback` row may be delivered to: the engine's callbackAllowlist, checked again at
   * delivery, so a row written under an older, wider list is not delivered once the host is gone
   * from it. (Default: none)
   */
  callbackAllowlist?: readonly string[];
  /** Errors of the loop itself (database away); deliveries record theirs on the row. */
  onError?: (err: unknown) => void;
}

const MAX_RETRY_AFTER_MS = 3_600_000;

/**
 * Delivers outbox rows (docs/outbox.md): claims due rows (SKIP LOCKED, scheduler role), POSTs each
 * with its idempotency key and a signature, and records the outcome — delivered, retry after a
 * backoff (408/429/5xx/network), or failed for good (any other 4xx, or out of attempts). Rows are
 * never deleted. Delivery is at least once; receivers deduplicate on Idempotency-Key.
 */
export class OutboxRelay {
  readonly #db: Db;
  readonly #opts: OutboxRelayOptions;
  readonly #policy: { initialMs: number; factor: number; maxMs: number };
  readonly #callbackHosts: ReadonlySet<string>;
  #running = false;
  #loop: Promise<void> | null = null;
  readonly #alarm = new Alarm();
  readonly #sleep = this.#alarm.waiter();
  #unlisten: (() => Promise<void>) | null = null;

  constructor(db: Db, opts: OutboxRelayOptions) {
    this.#db = db;
    this.#opts = opts;
    this.#policy = { initialMs: 1000, factor: 2, maxMs: 600_000, ...opts.backoff };
    this.#callbackHosts = new Set(opts.callbackAllowlist ?? []);
  }

  get #timeoutMs(): number {
    return this.#opts.timeoutMs ?? 10_000;
  }

  /** One round: claims up to `batch` due rows, delivers them and records each. Returns how many. */
  async relayOnce(): Promise<number> {
    const rows = await asScheduler(this.#db, (c) =>
      claimDueOutbox(c, {
        limit: this.#opts.batch ?? 16,
        // a row stays claimed while its delivery may still be under way
        leaseMs: this.#timeoutMs + 30_000,
        events: this.#opts.eventSink !== null,
      }),
    );
    await Promise.all(
      rows.map(async (row) => {
        const result = await this.#deliver(row);
        await asScheduler(this.#db, (c) => recordDelivery(c, row.id, result));
      }),
    );
    return rows.length;
  }

  /** Rounds until nothing is due (tests, shutdown). Rows put off by a backoff are not waited for. */
  async drain(): Promise<number> {
    let total = 0;
    for (let n = await this.relayOnce(); n > 0; n = await this.relayOnce()) total += n;
    return total;
  }

  async start(): Promise<void> {
    if (this.#running) return;
    this.#running = true;
    this.#unlisten = await this.#db.listen('flow_outbox', () => this.wake()).catch(() => null);
    this.#loop = this.#run();
  }

  /** Stops after the round in flight; its deliveries finish and are recorded. */
  async stop(): Promise<void> {
    this.#running = false;
    this.wake();
    await this.#loop;
    await this.#unlisten?.();
    this.#unlisten = null;
  }

  wake(): void {
    this.#alarm.ring();
  }

  async #run(): Promise<void> {
    while (this.#running) {
      let n = 0;
      try {
        n = await this.relayOnce();
      } catch (err) {
        this.#opts.onError?.(err);
      }
      if (n < (this.#opts.batch ?? 16) && this.#running) await this.#sleep.sleep(this.#opts.pollMs ?? 1000);
    }
  }

  async #deliver(row: OutboxRow): Promise<DeliveryResult> {
    const url = row.kind === 'callback' ? row.url : (this.#opts.eventSink?.url ?? null);
    if (url === null || !isHttpUrl(url)) {
      return { outcome: 'failed', error: `FLOW_OUTBOX_BAD_URL: ${row.kind} row has no http(s) URL to deliver to (${url})` };
    }
    // a callback goes to a caller's URL: its host, and the address that resolves to, are checked now
    let lookup: Awaited<ReturnType<typeof pinnedLookup>>;
    if (row.kind === 'callback') {
      const target = new URL(url);
      if (!hostAllowed(this.#callbackHosts, target)) {
        return { outcome: 'failed', error: `FLOW_CALLBACK_HOST_NOT_ALLOWED: ${target.host} is no longer on the engine's callbackAllowlist` };
      }
      try {
        lookup = await pinnedLookup(this.#callbackHosts, target, this.#opts.resolve ?? systemResolve);
      } catch (err) {
        return this.#classify(row, { status: 'failed', retryable: true, error: { code: 'NETWORK_ERROR', message: `${target.hostname}: ${String(err)}` } });
      }
      if (lookup === null) {
        return { outcome: 'failed', error: `FLOW_CALLBACK_HOST_NOT_ALLOWED: ${target.host} resolves to an internal address the callbackAllowlist does not name` };
      }
    }
    const payload = row.payload ?? null;
    const timestamp = Math.floor(Date.now() / 1000);
    const headers: Record<string, string> = {
      'idempotency-key': row.idempotency_key,
      'x-flow-event': row.topic,
      'x-flow-env': row.env_id,
      'x-flow-attempt': String(row.attempts + 1),
      'x-flow-timestamp': String(timestamp),
      // callHttp sends JSON.stringify(body): the very bytes signed here
      'x-flow-signature': signOutbox(this.#opts.secret, timestamp, JSON.stringify(payload)),
    };
    if (row.workflow_id !== null) headers['x-flow-workflow-id'] = row.workflow_id;
    const outcome = await callHttp({ method: 'POST', url, headers, body: payload, timeoutMs: this.#timeoutMs, ...(lookup ? { lookup } : {}) });
    return this.#classify(row, outcome);
  }

  #classify(row: OutboxRow, outcome: StepOutcome): DeliveryResult {
    if (outcome.status !== 'failed') return { outcome: 'delivered' };
    const attempt = row.attempts + 1;
    const error = `${outcome.error.code}: ${outcome.error.message}`;
    if (!outcome.retryable) return { outcome: 'failed', error };
    const maxAttempts = this.#opts.maxAttempts ?? 30;
    if (attempt >= maxAttempts) return { outcome: 'failed', error: `${error} (gave up after ${attempt} attempts)` };
    const wait = backoffMs(this.#policy, attempt, `${row.idempotency_key}:${row.id}:${attempt}`);
    return { outcome: 'retry', delayMs: Math.max(wait, Math.min(outcome.retryAfterMs ?? 0, MAX_RETRY_AFTER_MS)), error };
  }
}

function isHttpUrl(url: string): boolean {
  try {
    const { protocol } = new URL(url);
    return protocol === 'http:' || protocol === 'https:';
  } catch {
    return false;
  }
}
