import type { LogicVersion, StepOutcome } from '../../contracts/index.ts';
import { HOLD_CODES } from '../core/hold.ts';
import type { Instance } from '../core/instance.ts';
import { handlerEnvName } from '../executors/handlers.ts';
import { type CircuitRow, circuitFailed, circuitSucceeded, claimProbe, readCircuits, wakeCircuitHeld } from '../store/circuits.ts';
import type { Db } from '../store/db.ts';
import { asScheduler } from '../store/tx.ts';
import type { FlowLogger } from './log.ts';

/** When a handler profile's circuit opens and for how long (FLOW_CIRCUIT_*, FLOW_HANDLER_<NAME>_CIRCUIT_*). */
export interface CircuitPolicy {
  /** Consecutive failed calls (5xx, timeouts, connection errors) that open it; 0 never opens. */
  failures: number;
  /** How long it stays open before one probe call may go. */
  openMs: number;
}

export interface CircuitOptions {
  /** Every handler's policy unless it has its own. (Default: failures 0, never opens) */
  policy: CircuitPolicy;
  /** Per handler profile, keyed by its variable name (`LEDGER` for `ledger`). */
  handlers?: ReadonlyMap<string, CircuitPolicy>;
  /** How often a node rereads the circuits other nodes changed. (Default: 2000) */
  refreshMs?: number;
}

/** A call's answer that counts against the circuit: the service is down, not refusing. */
function isBreakdown(result: StepOutcome): boolean {
  if (result.status !== 'failed') return false;
  const { code, status } = result.error;
  return (status !== undefined && status >= 500) || code === 'STEP_TIMEOUT' || code === 'NETWORK_ERROR';
}

/**
 * The handler circuits, shared by every node through Postgres (migration 0028, engine/store/circuits.ts).
 * The healthy path costs nothing: a node reads or writes the table only once it knows of a
 * failure (its own, or another node's, reread every `refreshMs` in the background). While a
 * circuit is open, a step attempt that would call the handler is not made: its outcome is
 * FLOW_CIRCUIT_OPEN with the wait until the probe, which the core holds without using an attempt
 * (core/hold.ts). Compensations always call: a hold is a step's.
 */
export class Circuits {
  readonly #db: Db;
  readonly #opts: CircuitOptions;
  readonly #log: FlowLogger;
  /** Circuits known to be open or counting, by `env\0handler`; absent: closed and clean. */
  #known = new Map<string, CircuitRow>();
  #readAt = Number.NEGATIVE_INFINITY;
  #reading: Promise<void> | null = null;

  constructor(db: Db, opts: CircuitOptions, log: FlowLogger) {
    this.#db = db;
    this.#opts = opts;
    this.#log = log;
  }

  /** Whether any handler may ever open a circuit: without, the pool skips the gate altogether. */
  get enabled(): boolean {
    return this.#opts.policy.failures > 0 || [...(this.#opts.handlers?.values() ?? [])].some((p) => p.failures > 0);
  }

  /** The handler profile an instance's running step attempt calls, or null (no profile, or not a step). */
  handlerOf(logic: LogicVersion, instance: Instance): string | null {
    const running = instance.ctx.running;
    if (running === null) return null;
    const step = logic.steps[running.step];
    const def = running.kind === 'step' ? step : step?.compensate;
    if (def?.kind !== 'proxy') return null;
    return handlerEnvName(def.handler ?? instance.domain);
  }

  #policy(handler: string): CircuitPolicy {
    return this.#opts.handlers?.get(handler) ?? this.#opts.policy;
  }

  /**
   * Before a step attempt calls `handler`: null to call, or the held outcome when its circuit is
   * open (or half-open with another node's probe in flight). `probeMs`: the call's timeout.
   */
  async before(instance: Instance, handler: string, probeMs: number): Promise<StepOutcome | null> {
    this.#refreshSoon();
    if (instance.ctx.running?.kind !== 'step') return null;
    const known = this.#known.get(key(instance.env, handler));
    if (known === undefined || known.state !== 'open') return null;
    // the database unreachable: the call goes (it would fail as well, and count)
    const open = await asScheduler(this.#db, (c) => claimProbe(c, { env: instance.env, handler, probeMs })).catch(() => null);
    if (open === null) return null;
    this.#known.set(key(instance.env, handler), open);
    // a probe in flight elsewhere decides soon: look again then, not before a second
    const waitMs = Math.max(1000, open.waitMs ?? 0);
    const until = new Date(Date.now() + waitMs).toISOString();
    return {
      status: 'failed',
      retryable: true,
      retryAfterMs: waitMs,
      error: {
        code: HOLD_CODES.circuit,
        message: `handler ${handler} has failed ${open.failures} times in a row in env ${instance.env} (last: ${open.reason ?? 'unknown'}); its circuit is open, so the call waits until ${until} without using an attempt`,
      },
    };
  }

  /** After a call to `handler`: counts a breakdown, or closes the circuit on an answer. */
  async after(instance: Instance, handler: string, result: StepOutcome): Promise<void> {
    await this.#count(instance, handler, result).catch((err) => this.#log.warn({ err, env: instance.env, handler }, 'recording a call in its circuit failed'));
  }

  async #count(instance: Instance, handler: string, result: StepOutcome): Promise<void> {
    const env = instance.env;
    const k = key(env, handler);
    if (result.status === 'failed' && result.error.code === 'ABORTED') return;
    if (isBreakdown(result)) {
      const policy = this.#policy(handler);
      if (policy.failures <= 0) return;
      const reason = `${result.status === 'failed' ? result.error.code : ''}: ${result.status === 'failed' ? result.error.message.slice(0, 300) : ''}`;
      const { circuit, changed } = await asScheduler(this.#db, (c) =>
        circuitFailed(c, { env, handler, threshold: policy.failures, openMs: policy.openMs, reason }),
      );
      this.#known.set(k, circuit);
      if (changed) this.#log.warn({ event: 'circuit_opened', env, handler, failures: circuit.failures, reason, openUntil: circuit.openUntil }, 'circuit opened');
      return;
    }
    if (!this.#known.has(k)) return;
    const woken = await asScheduler(this.#db, async (c) => ((await circuitSucceeded(c, { env, handler })) ? wakeCircuitHeld(c, { env }) : null));
    this.#known.delete(k);
    if (woken !== null) this.#log.info({ event: 'circuit_closed', env, handler, woken }, 'circuit closed');
  }

  /** Rereads the table in the background when the last read is older than `refreshMs`. */
  #refreshSoon(): void {
    if (this.#reading !== null || performance.now() - this.#readAt < (this.#opts.refreshMs ?? 2000)) return;
    this.#readAt = performance.now();
    this.#reading = asScheduler(this.#db, readCircuits)
      .then((rows) => {
        this.#known = new Map(rows.map((r) => [key(r.env, r.handler), r]));
      })
      .catch((err) => this.#log.warn({ err }, 'reading the handler circuits failed'))
      .finally(() => {
        this.#reading = null;
      });
  }

  /** Waits for a background reread under way (tests, shutdown). */
  async settled(): Promise<void> {
    await this.#reading;
  }
}

function key(env: string, handler: string): string {
  return `${env}\0${handler}`;
}
