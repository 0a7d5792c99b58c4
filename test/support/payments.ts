import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { LogicVersion, StepOutcome } from '../../contracts/index.ts';
import type { Fake } from '../../engine/testing/index.ts';
import { FakeService } from './fake-service.ts';

/**
 * The examples' payments.capture (@2, and @3 with its fraud check and ledger settlement) as
 * compiled (test/fixtures/compiled, held equal to examples/ by test/compiler/compile-examples.test.ts),
 * with an owning service whose every answer is a function of the request: the same answers for
 * the in-process runner's fakes and for a real HTTP service, so the two can be compared.
 */
export const COMPILED = fileURLToPath(new URL('../fixtures/compiled', import.meta.url));
const load = (name: string) => JSON.parse(readFileSync(`${COMPILED}/${name}.json`, 'utf8')) as LogicVersion;
export const paymentsV2 = load('payments.capture@2');
export const paymentsV3 = load('payments.capture@3');

type Body = Record<string, unknown>;

/** The payments service's answer to each path (as examples/demo-service.ts answers, with ids derived from the payment). */
const ANSWERS: Record<string, (b: Body) => unknown> = {
  '/funds/reserve': (b) => ({ reservationId: `res-${String(b['paymentId'])}` }),
  '/funds/release': () => ({ released: true }),
  '/accounts/history': (b) => ({ accountId: b['accountId'], chargebacks: b['accountId'] === 'acct-risky' ? 2 : 0 }),
  '/fraud/check': (b) => ({ checkId: `frd-${String(b['paymentId'])}`, verdict: b['accountId'] === 'acct-fraud' ? 'refer' : 'clear' }),
  '/funds/capture': (b) => ({ captureId: `cap-${String(b['paymentId'])}`, capturedCents: 100 }),
  '/funds/refund': () => ({ refunded: true }),
  '/notify': () => ({ sent: true }),
};

/** The runner's fakes for the service (`host:` for the risk module's host call, which a real module runtime makes). */
export function paymentsFakes(seen: { path: string; key: string; body: unknown }[] = []): Record<string, Fake> {
  const out: Record<string, Fake> = {};
  for (const [path, answer] of Object.entries(ANSWERS)) {
    const fake: Fake = (call): StepOutcome => {
      seen.push({ path, key: call.idempotencyKey, body: call.input });
      return { status: 'succeeded', output: answer(call.input as Body) as never };
    };
    out[`payments${path}`] = fake;
    out[`host:payments${path}`] = fake;
  }
  return out;
}

/** The service over HTTP, answering as `paymentsFakes` does. */
export async function paymentsService(): Promise<FakeService> {
  const svc = new FakeService();
  for (const [path, answer] of Object.entries(ANSWERS)) svc.on(path, (req) => ({ status: 200, body: answer(req.body as Body) }));
  return svc.listen();
}

/** A capture's input: 120 EUR from `accountId`, settling as `settlement` says. */
export const payment = (paymentId: string, accountId = 'acct-1', settlement?: 'ledger' | 'immediate') => ({
  paymentId,
  accountId,
  amount: 120,
  currency: 'EUR',
  ...(settlement === undefined ? {} : { settlement }),
});
