/**
 * `npm run demo`: compiles the example workflows, starts the demo owning service, and runs
 * payments on the embedded store (in-memory PGlite) with real HTTP and real workers:
 * a small payment, a flaky ledger that needs a retry, a declined card that compensates, and a
 * large payment that waits for an approver.
 */
import { rm } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { formatTimeline } from '../cli/timeline.ts';
import { compile } from '../compiler/index.ts';
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

const payments = [
  { paymentId: 'pay-small', accountId: 'acct-1', amount: 25, currency: 'EUR', customerEmail: 'ana@example.com' },
  { paymentId: 'pay-flaky', accountId: 'acct-flaky', amount: 40, currency: 'EUR' },
  { paymentId: 'pay-declined', accountId: 'acct-2', amount: 75.5, currency: 'EUR' },
  { paymentId: 'pay-risky', accountId: 'acct-risky', amount: 120, currency: 'EUR' },
];
const ids = [];
for (const input of payments) ids.push((await engine.start({ logicId: 'payments.capture', input, correlationId: input.paymentId })).id);

say('\n— first pass: every payment runs until it ends or waits —\n');
for (const id of ids) say(formatTimeline(await engine.settled(id)));

const risky = ids[3]!;
say(`\n— an approver with scope payments:approve approves ${payments[3]!.paymentId} —\n`);
await engine.resume(risky, {
  step: 'approval',
  option: 'approve',
  payload: { note: 'known customer' },
  approver: { subject: 'alice@payments', scopes: ['flow:decide', 'payments:approve'] },
});
say(formatTimeline(await engine.settled(risky)));

const final = await Promise.all(ids.map((id) => engine.get(id)));
say(`\n${final.map((r) => `${String(r.correlationId).padEnd(14)} ${r.state}`).join('\n')}`);
const keys = new Set(service.log.map((l) => l.key));
say(`\nthe owning service saw ${service.log.length} calls under ${keys.size} idempotency keys (a retry reuses its key).`);

await engine.close();
await db.close();
await service.close();
