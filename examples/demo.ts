/**
 * `npm run demo`: compiles the example workflows, starts the demo owning service, and runs
 * payments on the embedded store (in-memory PGlite) with real HTTP and real workers:
 * a small payment, a flaky ledger that needs a retry, a declined card that compensates, a
 * large payment that waits for an approver, and (payments.capture@3) a payment whose funds settle
 * through the ledger, which waits until the ledger's settlement event reaches it.
 */
import { rm } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { SignJWT } from 'jose';
import { createFlowClient } from '../client/index.ts';
import { formatTimeline } from '../cli/timeline.ts';
import { compile } from '../compiler/index.ts';
import { buildApi } from '../engine/api/server.ts';
import { artifactModules, publishOrder } from '../engine/runtime/artifacts.ts';
import { Engine } from '../engine/runtime/engine.ts';
import { openDb } from '../engine/store/db.ts';
import { migrate } from '../engine/store/migrate.ts';
import { startDemoService } from './demo-service.ts';

const root = fileURLToPath(new URL('.', import.meta.url));
const out = fileURLToPath(new URL('../.flow/demo-artifacts/', import.meta.url));

const say = (s: string) => process.stdout.write(`${s}\n`);

await rm(out, { recursive: true, force: true });
const compiled = await compile({ root, out });
say(`compiled ${compiled.versions.length} workflow versions into ${out}`);

const service = await startDemoService();
const db = await openDb();
await migrate(db);
const engine = new Engine({
  db,
  executors: { handlers: new Map([['PAYMENTS', { url: service.url }]]) },
  worker: { concurrency: 8, pollMs: 20 },
});
// modules go into the database with their versions; the engine loads them from there
for (const doc of publishOrder(compiled.versions.map((v) => v.doc))) await engine.publishVersion(engine.env, doc, await artifactModules(out, doc));
await engine.workers.start();

// the engine's HTTP API on a loopback port: the service completes its 202 steps through it, and
// the approver answers the decision through it with a token (in production, from your IdP)
const AUTH_SECRET = 'demo-only-hs256-secret-0123456789abcdef';
const api = await buildApi({ engine, auth: { secret: AUTH_SECRET, production: false } });
const engineUrl = await api.app.listen({ host: '127.0.0.1', port: 0 });
service.connect(engineUrl);
say(`the engine API listens on ${engineUrl} (GET /docs)`);

/** Terminal, or parked on the approval decision or on the ledger's settlement. */
async function atRest(id: string) {
  for (;;) {
    const r = await engine.get(id);
    if (['completed', 'failed', 'compensated', 'cancelled', 'dead_lettered'].includes(r.state)) return r;
    if (r.state === 'waiting' && (r.currentStep === 'approval' || r.currentStep === 'settled')) return r;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const payments = [
  { paymentId: 'pay-small', accountId: 'acct-1', amount: 25, currency: 'EUR', customerEmail: 'ana@example.com' },
  { paymentId: 'pay-flaky', accountId: 'acct-flaky', amount: 40, currency: 'EUR' },
  { paymentId: 'pay-declined', accountId: 'acct-2', amount: 75.5, currency: 'EUR' },
  { paymentId: 'pay-risky', accountId: 'acct-risky', amount: 120, currency: 'EUR' },
];
const ids = [];
for (const input of payments) ids.push((await engine.start({ logicId: 'payments.capture', input, correlationId: input.paymentId })).id);

say('\n— first pass: every payment runs until it ends or waits —\n');
for (const id of ids) say(formatTimeline(await atRest(id)));

const risky = ids[3]!;
say(`\n— alice, whose token holds flow:decide and payments:approve, approves ${payments[3]!.paymentId} over HTTP —\n`);
const aliceToken = await new SignJWT({ envs: [engine.env], scope: 'flow:decide payments:approve' })
  .setProtectedHeader({ alg: 'HS256' })
  .setSubject('alice@payments')
  .setExpirationTime('10m')
  .sign(new TextEncoder().encode(AUTH_SECRET));
const alice = createFlowClient({ baseUrl: engineUrl, token: aliceToken, env: engine.env });
await alice.decide(risky, 'approval', { option: 'approve', payload: { note: 'known customer' } });
say(formatTimeline(await atRest(risky)));

const ledgerPayment = { paymentId: 'pay-ledger', accountId: 'acct-1', amount: 60, currency: 'EUR', settlement: 'ledger' };
say(`\n— ${ledgerPayment.paymentId} settles through the ledger: payments.capture@3 checks it for fraud, then waits for funds.settled —\n`);
const settling = (await engine.start({ logicId: 'payments.capture', input: ledgerPayment, correlationId: ledgerPayment.paymentId })).id;
ids.push(settling);
say(formatTimeline(await atRest(settling)));
say(`\n— the ledger posts ledger.funds_settled over HTTP; the message trigger delivers it to the payment it names —\n`);
const ledgerToken = await new SignJWT({ envs: [engine.env], scope: 'flow:events:ledger.*' })
  .setProtectedHeader({ alg: 'HS256' })
  .setSubject('ledger@payments')
  .setExpirationTime('10m')
  .sign(new TextEncoder().encode(AUTH_SECRET));
const ledger = createFlowClient({ baseUrl: engineUrl, token: ledgerToken, env: engine.env });
const settled = await ledger.ingestEvent({ type: 'ledger.funds_settled', idempotencyKey: 'ledger-L-991', payload: { paymentId: 'pay-ledger', ledgerRef: 'L-991', amount: 60 } });
say(`delivered: ${settled.delivered.map((d) => `${d.message} → ${d.workflowId} (${d.status})`).join(', ')}\n`);
say(formatTimeline(await atRest(settling)));

const final = await Promise.all(ids.map((id) => engine.get(id)));
say(`\n${final.map((r) => `${String(r.correlationId).padEnd(14)} ${r.state}`).join('\n')}`);
const keys = new Set(service.log.map((l) => l.key));
await service.close(); // waits for its last callback to be answered
say(`\nthe owning service saw ${service.log.length} calls under ${keys.size} idempotency keys (a retry reuses its key),`);
say(`and completed ${service.callbacks.length} notifications later through POST /v1/callbacks/{resumeToken}.`);

await api.close();
await engine.close();
await db.close();
