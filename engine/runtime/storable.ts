import { isThrottle } from '../core/hold.ts';
import { FlowError } from '../../contracts/errors.ts';
import type { FlowErrorBody, StepOutcome } from '../../contracts/index.ts';
import { tookNoEffect } from '../core/flow.ts';
import { DEFAULT_MAX_INPUT_BYTES, type StorableProblem, storableProblem } from '../core/storable.ts';
import type { EffectResult } from '../executors/index.ts';

export { DEFAULT_MAX_INPUT_BYTES };

/** The default longest wait a `Retry-After` answer may ask for: one hour. */
export const DEFAULT_RETRY_AFTER_MAX_MS = 3_600_000;

export class InputTooLarge extends FlowError {
  constructor(what: string, bytes: number, max: number) {
    super('FLOW_INPUT_TOO_LARGE', `${what} is ${bytes} bytes of JSON; the engine accepts at most ${max} (maxInputBytes)`, { status: 413 });
  }
}

export class InputUnstorable extends FlowError {
  constructor(what: string, path: string, why: string) {
    super('FLOW_INPUT_UNSTORABLE', `${what} cannot be stored: ${path} ${why}`, { status: 422, details: [{ path, why }] });
  }
}

/** A change from outside the worker loop (a completion, a decision, a verb) that Postgres refused for its data. */
export class ChangeUnstorable extends FlowError {
  constructor(err: unknown) {
    const state = String((err as { code?: unknown }).code);
    super('FLOW_INPUT_UNSTORABLE', `the change cannot be stored (SQLSTATE ${state}); nothing was written: ${String((err as Error).message).slice(0, 300)}`, {
      status: 422,
    });
  }
}

/**
 * Checks a caller's JSON before anything is written: not larger than `maxBytes`, not nested
 * deeper than MAX_DEPTH, and holding no string Postgres' jsonb cannot store (a NUL character, a
 * lone surrogate). Refused here, it never reaches a transaction — where jsonb would refuse it
 * with a bare SQL error, or, inside a step's output, hold the instance in a commit that can
 * never succeed.
 */
export function checkStorable(what: string, value: unknown, maxBytes: number): void {
  const problem = storableProblem(value, maxBytes);
  if (problem === null) return;
  if (problem.kind === 'too_large') throw new InputTooLarge(what, problem.bytes, problem.max);
  throw new InputUnstorable(what, problem.path, problem.why);
}

/** What a step result the engine cannot store becomes: a permanent step error (ARCHITECTURE.md, Limits). */
export function unstorableError(what: string, problem: StorableProblem): FlowErrorBody {
  return problem.kind === 'too_large'
    ? { code: 'FLOW_RESULT_TOO_LARGE', message: `${what} is ${problem.bytes} bytes of JSON; the engine stores at most ${problem.max} (maxInputBytes)` }
    : { code: 'FLOW_RESULT_UNSTORABLE', message: `${what} cannot be stored: ${problem.path} ${problem.why}` };
}

/**
 * The outcome recorded instead of a result whose commit Postgres refused for its data (a SQLSTATE
 * of a data exception or a program limit): a permanent failure of the attempt. Unless the result
 * it replaces (`replaced`, null for a host call's record) was a failure that took no effect, the
 * call took effect or may have, and the step keeps its compensation.
 */
export function unstorableCommit(err: unknown, replaced: StepOutcome | null): StepOutcome {
  const state = (err as { code?: unknown }).code;
  const message = `the store refused the attempt's result (SQLSTATE ${String(state)}): ${String((err as Error).message).slice(0, 300)}`;
  const error = cleanError({ code: 'FLOW_RESULT_UNSTORABLE', message });
  return replaced !== null && tookNoEffect(replaced) ? { status: 'failed', retryable: false, error } : { status: 'failed', retryable: false, error, effect: 'taken' };
}

export interface ResultLimits {
  maxBytes: number;
  maxRetryAfterMs: number;
  /** Stamped on each 429/503 answer for the core: FLOW_THROTTLE_BUDGET_MS (core/hold.ts). (Default: the core's) */
  throttleBudgetMs?: number;
}

/** The longest error message kept from an attempt: enough to act on, never the whole body. */
const MAX_ERROR_MESSAGE = 2000;

/**
 * An executor's result as the engine may record it, before the core sees it (so the journal and a
 * replay see the same): an output or a host call's record that cannot be stored becomes a
 * permanent failure of the attempt that took effect (its step keeps its compensation); an error's text is cut to well-formed Unicode without NUL;
 * a Retry-After wait is capped at `maxRetryAfterMs`. A result that needs none of it is returned
 * as it is.
 */
export function storableResult(result: EffectResult, limits: ResultLimits): EffectResult {
  if (result.status === 'succeeded') {
    const problem = storableProblem(result.output, limits.maxBytes);
    return problem === null ? result : { status: 'failed', retryable: false, error: unstorableError('the step output', problem), effect: 'taken' };
  }
  if (result.status === 'progress') {
    const call = result.record.calls.at(-1);
    const problem = call === undefined ? null : storableProblem(call, limits.maxBytes);
    return problem === null
      ? result
      : { status: 'failed', retryable: false, error: unstorableError(`host call ${call!.n} (${call!.importName})`, problem), effect: 'taken' };
  }
  if (result.status === 'parked') return result;
  return storableFailure(result, limits);
}

function storableFailure(result: Extract<StepOutcome, { status: 'failed' }>, limits: ResultLimits): StepOutcome {
  const { retryAfterMs } = result;
  const wait = retryAfterMs === undefined || Number.isNaN(retryAfterMs) ? undefined : Math.min(Math.max(0, retryAfterMs), limits.maxRetryAfterMs);
  const fits = typeof result.error.message === 'string' && result.error.message.length <= MAX_ERROR_MESSAGE;
  const error = fits && storableProblem(result.error, limits.maxBytes) === null ? result.error : cleanError(result.error);
  const budget = limits.throttleBudgetMs !== undefined && isThrottle(result) ? { throttleBudgetMs: limits.throttleBudgetMs } : {};
  if (wait === retryAfterMs && error === result.error && !('throttleBudgetMs' in budget)) return result;
  const { retryAfterMs: _, ...rest } = result;
  return { ...rest, error, ...(wait === undefined ? {} : { retryAfterMs: wait }), ...budget };
}

// String.prototype.toWellFormed (ES2024, Node 20): each lone surrogate becomes U+FFFD
const toWellFormed = (String.prototype as unknown as { toWellFormed: (this: string) => string }).toWellFormed;

/** An error body cut down to what jsonb holds: its strings well-formed, without NUL, the message bounded. */
function cleanError(error: FlowErrorBody): FlowErrorBody {
  const text = (s: unknown, max: number) => toWellFormed.call(String(s).slice(0, max).replaceAll('\0', '\ufffd'));
  const out: FlowErrorBody = { code: text(error.code, 200), message: text(error.message, MAX_ERROR_MESSAGE) };
  if (typeof error.status === 'number') out.status = error.status;
  if (typeof error.step === 'string') out.step = text(error.step, 200);
  if (typeof error.field === 'string') out.field = text(error.field, 200);
  return out;
}
