import { createHash } from 'node:crypto';
import { DEFAULTS, type RetryPolicy } from '../../contracts/index.ts';

export function policyOf(retry: RetryPolicy | undefined): Required<RetryPolicy> {
  return { ...DEFAULTS.retry, ...retry };
}

/**
 * Delay before attempt `attempt + 1`: exponential, capped, with "equal jitter" (half fixed, half
 * random). The random half is drawn from a hash of the attempt's identity, not from Math.random,
 * so a replay computes the very same delay.
 */
export function backoffMs(retry: RetryPolicy | undefined, attempt: number, identity: string): number {
  const p = policyOf(retry);
  const base = Math.min(p.maxMs, p.initialMs * p.factor ** (attempt - 1));
  return Math.round(base / 2 + (base / 2) * unitHash(identity));
}

/** A number in [0, 1) derived from a string. */
export function unitHash(s: string): number {
  return createHash('sha256').update(s).digest().readUInt32BE(0) / 2 ** 32;
}

/**
 * The key of visit `visit` of a step in a generation. A step entered again in the same generation
 * (a loop back to it) must not reuse its key, or the owning service replays its first answer:
 * visit k ≥ 2 appends `:visit:<k>`, before any `:compensate` or `:call:<n>` (ARCHITECTURE.md, Invariants: idempotency keys).
 */
function stepKey(id: string, step: string, generation: number, visit = 1): string {
  return visit > 1 ? `${id}:${step}:${generation}:visit:${visit}` : `${id}:${step}:${generation}`;
}

/** Idempotency keys: the same across retries, rotated by a new generation or visit. */
export const keys = {
  step: stepKey,
  compensation: (id: string, step: string, generation: number, visit = 1) => `${stepKey(id, step, generation, visit)}:compensate`,
  /** Host call n of a func run: the attempt's own key (step, or `…:compensate`) plus `:call:<n>`. */
  hostCall: (attemptKey: string, n: number) => `${attemptKey}:call:${n}`,
};
