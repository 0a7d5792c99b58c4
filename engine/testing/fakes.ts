import type { StepOutcome } from '../../contracts/index.ts';
import type { JsonValue } from '../core/instance.ts';

/** What a fake sees of one call. */
export interface FakeCall {
  step: string;
  kind: 'step' | 'compensation';
  input: JsonValue;
  attempt: number;
  idempotencyKey: string;
  /** The attempt's number in the instance's history: what its resume token names (see `FlowHandle.complete`). */
  seq: number;
  /** Set for a func step's host call: its number in the run and the import the module called. */
  hostCall?: { n: number; importName: string };
}

/** Answers one call; it may keep state (count attempts) — it is only ever called live, never on replay. */
export type Fake = (call: FakeCall) => StepOutcome | Promise<StepOutcome>;

/** Ready-made fakes for the outcomes that matter (ARCHITECTURE.md, Testing). */
export const fakes = {
  success: (output: JsonValue | ((call: FakeCall) => JsonValue) = null): Fake => (call) => ({
    status: 'succeeded',
    output: typeof output === 'function' ? output(call) : output,
  }),
  /** Fails transiently `times` times per idempotency key, then behaves like `then`. */
  transient: (times: number, then: Fake = fakes.success()): Fake => {
    const seen = new Map<string, number>();
    return (call) => {
      const n = seen.get(call.idempotencyKey) ?? 0;
      seen.set(call.idempotencyKey, n + 1);
      if (n < times) return { status: 'failed', retryable: true, error: { code: 'HTTP_503', message: 'unavailable', status: 503 } };
      return then(call);
    };
  },
  permanent: (code = 'HTTP_422', message = 'refused'): Fake => () => ({
    status: 'failed',
    retryable: false,
    error: { code, message, status: Number(code.replace(/\D/g, '')) || 400 },
  }),
  timeout: (): Fake => () => ({ status: 'failed', retryable: true, error: { code: 'STEP_TIMEOUT', message: 'no answer in time' } }),
  /** Answers 202 waiting: the step parks until completed through its resume token. */
  parked: (): Fake => () => ({ status: 'parked' }),
  /** Plays the given outcomes in order, then repeats the last. */
  sequence: (...outcomes: StepOutcome[]): Fake => {
    let i = 0;
    return () => outcomes[Math.min(i++, outcomes.length - 1)]!;
  },
};

/**
 * The order an unreliable channel might hand `items` over in (a ledger's events, a partner's
 * messages): each item at least once, in a shuffled order, and `repeats` of them handed over
 * again later — the same item, so the same key: the receiver must answer it as a duplicate.
 * The same `seed` gives the same order, so a failing one can be run again.
 * (`repeats` default: half the items, rounded up)
 */
export function unreliableDelivery<T>(items: readonly T[], opts: { seed: number; repeats?: number }): T[] {
  const random = seeded(opts.seed);
  const pick = (n: number) => Math.floor(random() * n);
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = pick(i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  const repeats = items.length === 0 ? 0 : (opts.repeats ?? Math.ceil(items.length / 2));
  for (let r = 0; r < repeats; r++) {
    const item = items[pick(items.length)]!;
    // anywhere after its first delivery: a redelivery never comes first
    const after = out.indexOf(item) + 1;
    out.splice(after + pick(out.length - after + 1), 0, item);
  }
  return out;
}

/** mulberry32: a small seeded generator, so that an order is reproducible from its seed. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
