import { createFlowClient } from '../client/index.ts';

/**
 * One instance of each example domain, started through the API as a user would, so a fresh
 * `npm run dev` shows all three running: a payment, a tenant with two services (its children; it
 * then waits five minutes for DNS), and the statements an `account.opened` event starts. Keyed,
 * so a restart on the same state starts nothing twice.
 */
export async function seedExamples(o: { url: string; token: string; env: string }): Promise<string[]> {
  const flow = createFlowClient({ baseUrl: o.url, token: o.token, env: o.env });
  const payment = await flow.start(
    { logicId: 'payments.capture', input: { paymentId: 'pay-demo-1', accountId: 'acct-demo', amount: 42.5, currency: 'EUR' } },
    { idempotencyKey: 'seed:payments' },
  );
  const tenant = await flow.start(
    { logicId: 'provisioning.tenant', input: { tenantId: 'tn-demo', plan: 'pro', services: [{ name: 'db', region: 'eu' }, { name: 'api', region: 'eu' }] } },
    { idempotencyKey: 'seed:provisioning' },
  );
  const opened = await flow.ingestEvent({
    type: 'account.opened',
    idempotencyKey: 'seed:statements',
    payload: { accountId: 'acct-demo', currency: 'EUR', channel: 'web' },
  });
  return [payment.record.id, tenant.record.id, ...opened.ids];
}
