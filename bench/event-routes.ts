/**
 * What routing an event by correlationId costs among N live instances of the definition: the
 * ingest of one event delivered to one of them (its transaction, the lookup through
 * workflows_correlation, the delivery's commit), over 50 events; with NO_INDEX=1 the same without
 * the index. Run: bash scripts/with-postgres.sh npx tsx bench/event-routes.ts 200000
 */
import { performance } from 'node:perf_hooks';
import { Engine } from '../engine/runtime/engine.ts';
import { asScheduler } from '../engine/store/tx.ts';
import { cloneInstances } from '../test/support/bulk-instances.ts';
import { closeTestDb, openTestDb } from '../test/support/db.ts';
import { makeLogic } from '../test/contracts/helpers.ts';

const N = Number(process.argv[2] ?? 200_000);
const db = await openTestDb('postgres');
const engine = new Engine({ db, env: 'test-env' });
const logic = makeLogic({
  logicId: 'bench.settle',
  start: 'settled',
  steps: { settled: { kind: 'waitFor', message: 'funds.settled', next: 'done' }, done: { kind: 'pass' } },
  triggers: [{ event: 'ledger.funds_settled', message: 'funds.settled', match: { correlationId: 'event.payload.paymentId' } }],
});
await engine.publish(logic, 'test-env');
const t = await engine.start({ logicId: logic.logicId, input: {}, env: 'test-env', correlationId: 'template' });
await engine.workers.drain();
await cloneInstances(db, [t.id], N);
await asScheduler(db, (c) => c.query(`UPDATE workflows SET correlation_id = 'pay-' || substr(id::text, 1, 12) WHERE logic_id = $1`, [logic.logicId]));
if (process.env['NO_INDEX']) await db.pool.query('DROP INDEX workflows_correlation');
await asScheduler(db, (c) => c.query('ANALYZE workflows'));
const ids = (await asScheduler(db, (c) => c.query<{ c: string }>(`SELECT correlation_id AS c FROM workflows WHERE logic_id = $1 ORDER BY random() LIMIT 50`, [logic.logicId]))).rows.map((r) => r.c);
const ms: number[] = [];
for (const [i, c] of ids.entries()) {
  const t0 = performance.now();
  const r = await engine.ingestEvent({ type: 'ledger.funds_settled', idempotencyKey: `e-${i}`, env: 'test-env', payload: { paymentId: c } });
  ms.push(performance.now() - t0);
  if (r.delivered.length !== 1 || r.delivered[0]!.status !== 'delivered') throw new Error(`event ${i}: ${JSON.stringify(r.delivered)}`);
}
ms.sort((a, b) => a - b);
const plan = await asScheduler(db, (c) =>
  c.query(`EXPLAIN SELECT id FROM workflows WHERE logic_id = $1 AND correlation_id = $2 AND version = 1 AND state NOT IN ('completed','failed','compensated','cancelled','dead_lettered') ORDER BY id LIMIT 1001`, [logic.logicId, ids[0]]),
);
console.log(`${N + 1} live instances; ingest of an event routed by correlationId to one of them: p50 ${ms[25]!.toFixed(1)} ms, p90 ${ms[45]!.toFixed(1)} ms, max ${ms[49]!.toFixed(1)} ms (50 events)`);
console.log(plan.rows.map((r) => Object.values(r)[0]).join('\n'));
await engine.close();
await closeTestDb(db);
