import { describe, expect, it } from 'vitest';
import type { StepDef, StepOutcome } from '../../contracts/index.ts';
import { holdOf } from '../../engine/core/hold.ts';
import type { Running } from '../../engine/core/instance.ts';
import { parseRetryAfter } from '../../engine/executors/http-call.ts';

/** Holds (core/hold.ts): what a 429 answered again and again does to the step's throttle budget. */
const step: StepDef = { kind: 'proxy', path: '/busy', handler: 'ledger', retry: { maxAttempts: 2, initialMs: 10, maxMs: 100 }, throttleBudgetMs: 1_000 };
const running: Running = { seq: 1, kind: 'step', step: 'call', attempt: 1, generation: 0, input: {}, idempotencyKey: 'wf:call:0', budgetStart: 1 };
const throttled = (retryAfterMs?: number): Extract<StepOutcome, { status: 'failed' }> => ({
  status: 'failed',
  error: { code: 'HTTP_429', message: 'slow down', status: 429 },
  retryable: true,
  ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
});

/** How many holds in a row the same answer gets before it counts as an attempt (null: more than `max`). */
function holdsUntilSpent(outcome: Extract<StepOutcome, { status: 'failed' }>, max = 10_000): number | null {
  let r = running;
  for (let n = 0; n < max; n++) {
    const hold = holdOf(step, r, outcome);
    if (hold === null) return n;
    r = { ...r, ...hold.running };
  }
  return null;
}

describe('holds', () => {
  it('a Retry-After of 0 (or a date past) still spends the budget: at least the step backoff is waited', () => {
    const n = holdsUntilSpent(throttled(0));
    expect(n).not.toBeNull();
    expect(n).toBeGreaterThan(0);
  });

  it('a Retry-After longer than the backoff is waited as given', () => {
    const hold = holdOf(step, running, throttled(400))!;
    expect(hold.waitMs).toBe(400);
    expect(holdsUntilSpent(throttled(400))).toBe(2);
  });

  it('Retry-After: seconds or an HTTP date; anything else is no Retry-After', () => {
    expect(parseRetryAfter('5')).toBe(5_000);
    expect(parseRetryAfter(' 0 ')).toBe(0);
    expect(parseRetryAfter('Thu, 01 Jan 1970 00:00:00 GMT')).toBe(0);
    expect(parseRetryAfter(new Date(Date.now() + 60_000).toUTCString())).toBeGreaterThan(50_000);
    for (const garbage of ['-1', 'soon', '1e9', '-5 ', '', 'Sunday, 06-Nov-94 08:49:37']) expect(parseRetryAfter(garbage), garbage).toBeUndefined();
  });
});
