/**
 * What naming the hot path's statements saves (node-postgres `{ name, text, values }`: parsed and
 * planned once per connection, then only bound and executed). Each statement is run unnamed and
 * named in alternating rounds on one client, against rows it does not match, so the figure is the
 * statement's fixed cost — what the name can save — not the work of a real commit. Asserts nothing.
 *
 *   bash scripts/with-postgres.sh npx tsx bench/prepared-statements.bench.ts
 */
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { openDb } from '../engine/store/db.ts';
import { migrate } from '../engine/store/migrate.ts';
const url = process.env['DATABASE_URL'];
if (!url) throw new Error('set DATABASE_URL (scripts/with-postgres.sh starts a Postgres for you)');
const schema = `prep_${Date.now()}`;
const db = await openDb(url, { schema, poolSize: 1 });
await migrate(db);
const c = await db.pool.connect();
const p = JSON.stringify({ env: 'default', id: '00000000-0000-0000-0000-000000000000', rowVersion: 1, fromState: 'processing', state: 'processing', ctx: {}, attempts: [], outbox: [], timers: [] });
const stmts = {
  commit: (named: boolean) => ({ ...(named ? { name: 'c' } : {}), text: 'SELECT commit_journaled($1::jsonb) AS n', values: [p] }),
  claim: (named: boolean) => ({ ...(named ? { name: 'k' } : {}), text: 'SELECT * FROM claim_workflows($1, $2)', values: [16, 30000] }),
  heartbeat: (named: boolean) => ({ ...(named ? { name: 'h' } : {}), text: `UPDATE workflows SET lease_expires_at = now() + $3::float8 * interval '1 millisecond' WHERE id = $1 AND lease_token = $2`, values: ['00000000-0000-0000-0000-000000000000', '00000000-0000-0000-0000-000000000000', 30000] }),
};
for (const [k, make] of Object.entries(stmts)) {
  const res: Record<string, number[]> = { plain: [], named: [] };
  for (let round = 0; round < 6; round++)
    for (const named of [false, true]) {
      const t0 = performance.now();
      for (let i = 0; i < 500; i++) await c.query(make(named) as pg.QueryConfig);
      res[named ? 'named' : 'plain']!.push(((performance.now() - t0) / 500) * 1000);
    }
  const med = (a: number[]) => a.sort((x, y) => x - y)[Math.floor(a.length / 2)]!;
  const plain = med(res.plain!);
  const named = med(res.named!);
  process.stdout.write(`${k.padEnd(10)} unnamed ${plain.toFixed(0)} µs  named ${named.toFixed(0)} µs  ratio ${(named / plain).toFixed(2)}  (median of 6 rounds × 500, one client)\n`);
}
c.release();
await db.pool.query(`DROP SCHEMA ${schema} CASCADE`);
await db.close();
