import type { FlowErrorBody, StepDef, StepOutcome } from '../../contracts/index.ts';
import type { Running } from './instance.ts';
import { backoffMs } from './retry.ts';
import { MAX_WAIT_MS } from './storable.ts';

/**
 * Holds: a failed call that waits and runs the same attempt again without using one
 * (docs/owning-services.md, "429, 503 and the circuit breaker"). The service said it is
 * overloaded (429, 503), up to the step's throttle budget; or the engine did not call at all
 * because the handler's circuit is open, for as long as it stays open. A hold is recorded as a
 * failed row with one of these codes, followed by a new row of the same attempt number.
 */
export const HOLD_CODES = { throttled: 'FLOW_THROTTLED', circuit: 'FLOW_CIRCUIT_OPEN' } as const;

/** The budget when neither the step nor the engine's configuration sets one: 15 minutes. */
export const DEFAULT_THROTTLE_BUDGET_MS = 900_000;

export interface Hold {
  waitMs: number;
  /** What the held row records. */
  error: FlowErrorBody;
  /** The running attempt's hold counters after this one. */
  running: Pick<Running, 'heldMs' | 'holds'>;
}

/**
 * The answers that mean "too much, come back later" rather than "broken": a 429, and a 503 that
 * says when to come back (Retry-After). A bare 503 is a service down: an ordinary transient
 * failure, which counts an attempt and, repeated, opens the handler's circuit.
 */
export function isThrottle(outcome: Extract<StepOutcome, { status: 'failed' }>): boolean {
  const { status } = outcome.error;
  return outcome.retryable && (status === 429 || (status === 503 && outcome.retryAfterMs !== undefined));
}

/**
 * Whether the failed outcome of a step's running attempt is held, and for how long. An open
 * circuit always holds (the call was never made). A 429/503 holds for its Retry-After (capped
 * before the core sees it; never less than the step's first backoff), else the step's backoff,
 * while the waits so far plus this one stay within the budget; past it, the answer counts as an ordinary failed attempt. The backoff's
 * jitter is a hash of the hold's identity, as a retry's: a replay decides the same wait.
 */
export function holdOf(step: StepDef, running: Running, outcome: Extract<StepOutcome, { status: 'failed' }>): Hold | null {
  const holds = (running.holds ?? 0) + 1;
  const heldMs = running.heldMs ?? 0;
  if (outcome.error.code === HOLD_CODES.circuit) {
    const waitMs = Math.min(MAX_WAIT_MS, outcome.retryAfterMs ?? 0);
    return { waitMs, error: { ...outcome.error, step: running.step }, running: { heldMs, holds } };
  }
  if (!isThrottle(outcome) || (step.kind !== 'proxy' && step.kind !== 'http')) return null;
  const budget = step.throttleBudgetMs ?? outcome.throttleBudgetMs ?? DEFAULT_THROTTLE_BUDGET_MS;
  // a Retry-After is waited as given, but never less than the step's first backoff: one of 0 (or
  // a date already past) answered again and again would hold the attempt forever, spending nothing
  const identity = `${running.idempotencyKey}:${running.attempt}:hold:${holds}`;
  const waitMs =
    outcome.retryAfterMs === undefined ? backoffMs(step.retry, holds, identity) : Math.max(outcome.retryAfterMs, backoffMs(step.retry, 1, identity), 1);
  if (heldMs + waitMs > budget) return null;
  const spent = heldMs + waitMs;
  const message = `${outcome.error.message} — throttled: attempt ${running.attempt} runs again in ${waitMs} ms without using an attempt (${spent} of ${budget} ms of the step's throttle budget spent)`;
  return {
    waitMs,
    error: { code: HOLD_CODES.throttled, message, step: running.step, ...(outcome.error.status === undefined ? {} : { status: outcome.error.status }) },
    running: { heldMs: spent, holds },
  };
}
