/**
 * What a schedule costs between its ticks: the timer loop's due lookup, timed with N schedules of
 * which none is due. Run: bash scripts/with-postgres.sh npx tsx bench/schedule-due-lookup.ts 100000
 */
import { openTestDb, closeTestDb } from '../test/support/db.ts';
import { dueSchedules } from '../engine/store/schedules.ts';
import { asScheduler } from '../engine/store/tx.ts';

const db = await openTestDb('postgres');
const N = Number(process.argv[2] ?? 100000);
await asScheduler(db, (c) => c.query(
  `INSERT INTO schedules (env_id, id, logic_id, origin, cron, timezone, overlap, catch_up, next_at)
   SELECT 'e' || (i % 10), 's' || i, 'x', 'api', '0 6 1 * *', 'UTC', 'skip', 'PT5M', now() + (i || ' seconds')::interval + interval '1 hour' FROM generate_series(1, $1) i`, [N]));
await db.pool.query('ANALYZE schedules');
const terminal = ['completed', 'failed', 'cancelled'];
for (let i = 0; i < 20; i++) await asScheduler(db, (c) => dueSchedules(c, null, 100, terminal));
const t0 = performance.now();
const R = 200;
for (let i = 0; i < R; i++) await asScheduler(db, (c) => dueSchedules(c, null, 100, terminal));
console.log(`${N} schedules, none due: ${((performance.now() - t0) / R).toFixed(2)} ms per due lookup (transaction included)`);
const plan = await asScheduler(db, (c) => c.query(`EXPLAIN (ANALYZE, BUFFERS) SELECT env_id, id FROM schedules WHERE NOT paused AND next_at <= now() ORDER BY next_at LIMIT 100`));
console.log(plan.rows.map((r) => r['QUERY PLAN']).join('\n'));
await closeTestDb(db);
