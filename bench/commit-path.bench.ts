/**
 * The engine's write path per step, on Postgres: proxy steps (one commit each) at the bench's
 * concurrency, with what each step costs the database — write transactions (xid delta), commits,
 * WAL records/bytes/fsyncs, statements the engine sent (by kind), and how many updates of
 * `workflows` / `step_runs` were heap-only (HOT). Then what an idle engine sends per second.
 * Prints; asserts nothing. The bench's own polling goes through a client kept out of the counts.
 *
 *   BENCH_WORKFLOWS=300 bash scripts/with-postgres.sh npx tsx bench/commit-path.bench.ts
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import type { LogicVersion, StepDef } from '../contracts/index.ts';
import { Engine } from '../engine/runtime/engine.ts';
import { openDb } from '../engine/store/db.ts';
import { migrate } from '../engine/store/migrate.ts';
import { makeLogic } from '../test/contracts/helpers.ts';
import { fmt, minimalService, pool } from './support.ts';

const url = process.env['DATABASE_URL'];
if (!url) throw new Error('set DATABASE_URL (scripts/with-postgres.sh starts a Postgres for you)');
const CONCURRENCY = Number(process.env['BENCH_CONCURRENCY'] ?? 16);
const WORKFLOWS = Number(process.env['BENCH_WORKFLOWS'] ?? 300);
const STEPS = 10;
const out = (s: string) => process.stdout.write(`${s}\n`);

// every statement a pg client sends, by its first words; the bench's own client is left out
const sent = new Map<string, number>();
const own = new WeakSet<object>();
const query = pg.Client.prototype.query;
pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
  if (!own.has(this)) {
    const q = args[0] as string | { text: string };
    const text = typeof q === 'string' ? q : q.text;
    const key = text.replace(/\s+/g, ' ').trim().slice(0, 40);
    sent.set(key, (sent.get(key) ?? 0) + 1);
  }
  return (query as (...a: unknown[]) => unknown).apply(this, args);
} as typeof pg.Client.prototype.query;

function chain(): LogicVersion {
  const steps: Record<string, StepDef> = {};
  for (let i = 0; i < STEPS; i++) steps[`s${i}`] = { kind: 'proxy', path: '/step', ...(i + 1 < STEPS ? { next: `s${i + 1}` } : {}) };
  return makeLogic({ logicId: 'bench.commit', domain: 'bench', start: 's0', steps });
}

interface Snapshot {
  commits: number;
  xid: number;
  walRecords: number;
  walBytes: number;
  walSync: number;
  tables: Record<string, { upd: number; hot: number }>;
}

async function snapshot(c: pg.Client, schema: string): Promise<Snapshot> {
  await new Promise((r) => setTimeout(r, 1200)); // idle backends flush their counters lazily
  await c.query('SELECT pg_stat_clear_snapshot()');
  const db = await c.query('SELECT xact_commit::float8 AS n FROM pg_stat_database WHERE datname = current_database()');
  const xid = await c.query('SELECT pg_snapshot_xmax(pg_current_snapshot())::text::float8 AS n');
  const wal = await c.query('SELECT wal_records::float8 AS r, wal_bytes::float8 AS b, wal_sync::float8 AS s FROM pg_stat_wal');
  // a partitioned table's counts are its partitions' (step_runs_p20261130…, step_runs_default): summed under its name
  const t = await c.query(
    `SELECT regexp_replace(relname, '_(p[0-9]{8}|default)$', '') AS relname, sum(n_tup_upd)::float8 AS upd, sum(n_tup_hot_upd)::float8 AS hot
     FROM pg_stat_user_tables WHERE schemaname = $1 GROUP BY 1`,
    [schema],
  );
  return {
    commits: db.rows[0].n,
    xid: xid.rows[0].n,
    walRecords: wal.rows[0].r,
    walBytes: wal.rows[0].b,
    walSync: wal.rows[0].s,
    tables: Object.fromEntries(t.rows.map((r) => [r.relname, { upd: r.upd, hot: r.hot }])),
  };
}

const service = await minimalService();
const watcher = new pg.Client({ connectionString: url });
own.add(watcher);
await watcher.connect();

const schema = `bench_commit_${Date.now()}`;
const db = await openDb(url, { schema, poolSize: CONCURRENCY + 4 });
await migrate(db);
const engine = new Engine({ db, executors: { handlers: new Map([['BENCH', { url: service.url }]]) }, worker: { concurrency: CONCURRENCY, pollMs: 20 } });
const logic = chain();
await engine.publish(logic);

// an idle engine: what it sends per second with nothing to do (default poll interval)
const idle = new Engine({ db, executors: {}, worker: { concurrency: CONCURRENCY } });
await idle.workers.start();
await new Promise((r) => setTimeout(r, 500));
sent.clear();
await new Promise((r) => setTimeout(r, 3000));
const idlePerSec = [...sent.values()].reduce((a, b) => a + b, 0) / 3;
const idleSent = [...sent].sort((x, y) => y[1] - x[1]).slice(0, 5);
await idle.close();

const before = await snapshot(watcher, schema);
sent.clear();
const t0 = performance.now();
await engine.workers.start();
await pool(WORKFLOWS, CONCURRENCY, async () => {
  await engine.start({ logicId: logic.logicId, input: {} });
});
for (;;) {
  const r = await watcher.query(`SELECT count(*)::int AS n FROM ${schema}.workflows WHERE state = 'completed'`);
  if (r.rows[0].n === WORKFLOWS) break;
  await new Promise((res) => setTimeout(res, 10));
}
const seconds = (performance.now() - t0) / 1000;
await engine.close();
await db.close();
const after = await snapshot(watcher, schema);
await watcher.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
await watcher.end();
await service.close();

const steps = WORKFLOWS * STEPS;
const per = (n: number) => fmt(n / steps, 2);
out(`commit path: ${WORKFLOWS} workflows × ${STEPS} proxy steps, concurrency ${CONCURRENCY}`);
out(`steps/s                        ${fmt(steps / seconds)}`);
out(`commits/step                   ${per(after.commits - before.commits)}`);
out(`write transactions/step (xid)  ${per(after.xid - before.xid)}`);
out(`WAL records/step               ${per(after.walRecords - before.walRecords)}   bytes/step ${per(after.walBytes - before.walBytes)}   fsyncs/step ${per(after.walSync - before.walSync)}`);
for (const rel of ['workflows', 'step_runs']) {
  const upd = (after.tables[rel]?.upd ?? 0) - (before.tables[rel]?.upd ?? 0);
  const hot = (after.tables[rel]?.hot ?? 0) - (before.tables[rel]?.hot ?? 0);
  out(`${rel.padEnd(10)} updates/step ${per(upd)}   HOT ${fmt(hot)}/${fmt(upd)} = ${fmt(upd === 0 ? 0 : (100 * hot) / upd, 0)}%`);
}
const total = [...sent.values()].reduce((a, b) => a + b, 0);
out(`statements sent/step           ${per(total)}`);
for (const [k, n] of [...sent].sort((a, b) => b[1] - a[1]).slice(0, 10)) out(`  ${per(n).padStart(6)}  ${k}`);
out(`idle engine, statements/s      ${fmt(idlePerSec, 1)}`);
for (const [k, n] of idleSent) out(`  ${fmt(n / 3, 1).padStart(6)}  ${k}`);
