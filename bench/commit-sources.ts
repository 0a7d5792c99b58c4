/**
 * Where an engine step's commits come from: the proxy case of `npm run bench` (200 workflows of
 * 10 proxy steps by default), with every transaction the engine process sends counted by what it
 * is (node-postgres's Client.query wrapped in this process), beside the server's own count
 * (pg_stat_database.xact_commit) and what autovacuum did meanwhile. With pg_stat_statements
 * loaded (`npm run bench:commits` loads it in its throw-away server; FLOW_PG_OPTS passes server
 * options to scripts/with-postgres.sh) it also lists the server's top statements by calls.
 * Prints tables; asserts nothing.
 *
 *   npm run bench:commits [-- --concurrency 64] [--watched]      (BENCH_WORKFLOWS overrides the 200)
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { type LogicVersion, type StepDef, TERMINAL_STATES } from '../contracts/index.ts';
import { Engine } from '../engine/runtime/engine.ts';
import type { TransitionObserver } from '../engine/runtime/observer.ts';
import { openDb } from '../engine/store/db.ts';
import { migrate } from '../engine/store/migrate.ts';
import { makeLogic } from '../test/contracts/helpers.ts';
import { SentTransactions } from './sent-transactions.ts';
import { fmt, markdownTable, minimalService, pool } from './support.ts';

const url = process.env['DATABASE_URL'];
if (!url) throw new Error('set DATABASE_URL (npm run bench:commits starts a Postgres for you)');
const WORKFLOWS = Number(process.env['BENCH_WORKFLOWS'] ?? 200);
const at = process.argv.indexOf('--concurrency');
const CONCURRENCY = at > 0 ? Number(process.argv[at + 1]) : 16;
const STEPS = 10;
const out = (s: string) => process.stdout.write(`${s}\n`);

function chain(): LogicVersion {
  const steps: Record<string, StepDef> = {};
  for (let i = 0; i < STEPS; i++) steps[`s${i}`] = { kind: 'proxy', path: '/step', ...(i + 1 < STEPS ? { next: `s${i + 1}` } : {}) };
  return makeLogic({ logicId: 'bench.proxy', domain: 'bench', start: 's0', steps });
}

const SERVER = `SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())::bigint AS commits,
  (SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0) FROM pg_stat_all_tables)::bigint AS autovac,
  (SELECT wal_sync FROM pg_stat_wal)::bigint AS wal_syncs`;

const sent = new SentTransactions();
sent.install();
const service = await minimalService();
const meta = new pg.Client({ connectionString: url });
await meta.connect();
const statements = (await meta.query(`SELECT 1 FROM pg_available_extensions WHERE name = 'pg_stat_statements'`)).rowCount === 1;
let tracking = false;
if (statements) {
  await meta.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  tracking = await meta.query('SELECT pg_stat_statements_reset()').then(
    () => true,
    () => false, // not in shared_preload_libraries
  );
}

const schema = `commits_${Date.now()}`;
const logic = chain();
const setupDb = await openDb(url, { schema, poolSize: 20 });
await migrate(setupDb);
const setup = new Engine({ db: setupDb, executors: { handlers: new Map([['BENCH', { url: service.url }]]) } });
await setup.publish(logic);
await pool(WORKFLOWS, 16, async () => {
  await setup.start({ logicId: logic.logicId, input: {} });
});
await setup.close();
await setupDb.close();

let ended = 0;
let done: () => void = () => {};
const finished = new Promise<void>((r) => (done = r));
const observer: TransitionObserver = {
  onTransition: (_f, t, committed) => {
    if (committed && TERMINAL_STATES.has(t.instance.state) && ++ended === WORKFLOWS) done();
  },
};
// --watched: as if a console page were open all along (a live change_watchers row, migration 0013)
const WATCHED = process.argv.includes('--watched');
if (WATCHED) await meta.query(`INSERT INTO ${schema}.change_watchers (id, until) VALUES (gen_random_uuid(), now() + interval '1 hour')`);
const db = await openDb(url, { schema, poolSize: CONCURRENCY + 4 });
const engine = new Engine({ db, executors: { handlers: new Map([['BENCH', { url: service.url }]]) }, worker: { concurrency: CONCURRENCY, pollMs: 20 }, observer });

await sleep(1200); // idle backends report their statistics lazily
await meta.query('SELECT pg_stat_force_next_flush()');
const before = (await meta.query(SERVER)).rows[0];
if (tracking) await meta.query('SELECT pg_stat_statements_reset()');
sent.counting = true;
const t0 = performance.now();
await engine.workers.start();
await finished;
const seconds = (performance.now() - t0) / 1000;
await engine.close();
await db.close();
sent.counting = false;
while ((await meta.query(`SELECT 1 FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`)).rowCount! > 0) await sleep(10);
await meta.query('SELECT pg_stat_force_next_flush()');
const after = (await meta.query(SERVER)).rows[0];
// the meta connection's own statements between the readings: reset, flush, the polls of pg_stat_activity — counted by pg_stat_statements when loaded, else estimated below
const topByCalls = tracking
  ? (
      await meta.query<{ query: string; calls: string }>(
        `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls FROM pg_stat_statements WHERE toplevel ORDER BY calls DESC LIMIT 25`,
      )
    ).rows
  : [];
// every level (the script loads pg_stat_statements with track = all): where the server's execution time goes
const byTime = tracking
  ? (
      await meta.query<{ query: string; calls: string; ms: number }>(
        `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls, total_exec_time AS ms FROM pg_stat_statements
         WHERE query !~ 'pg_stat' ORDER BY total_exec_time DESC LIMIT 20`,
      )
    ).rows
  : [];
const ownMeta = tracking
  ? topByCalls.filter((r) => /pg_stat_activity|pg_stat_force_next_flush|pg_stat_statements_reset/.test(r.query)).reduce((n, r) => n + Number(r.calls), 0)
  : 0;
await meta.query(`DROP SCHEMA ${schema} CASCADE`);
await meta.end();
await service.close();

const steps = WORKFLOWS * STEPS;
const sentTotal = sent.total();
const serverCommits = Number(after.commits) - Number(before.commits) - ownMeta;
out(`commit sources: ${WORKFLOWS} workflows × ${STEPS} proxy steps, concurrency ${CONCURRENCY}${WATCHED ? ', a console page watching' : ''}, ${fmt(steps / seconds)} steps/s`);
out('');
const rows = [...sent.tx.entries()].sort((a, b) => b[1] - a[1]).map(([k, n]) => [k, fmt(n), fmt(n / steps, 3)]);
rows.push(['**all the engine process sent**', fmt(sentTotal), fmt(sentTotal / steps, 3)]);
rows.push(['server: xact_commit delta (the meta connection\'s own subtracted)', fmt(serverCommits), fmt(serverCommits / steps, 3)]);
rows.push(['server: WAL fsyncs (pg_stat_wal.wal_sync delta)', fmt(Number(after.wal_syncs) - Number(before.wal_syncs)), fmt((Number(after.wal_syncs) - Number(before.wal_syncs)) / steps, 3)]);
rows.push(['server: autovacuum + autoanalyze runs meanwhile', fmt(Number(after.autovac) - Number(before.autovac)), '']);
out(markdownTable(['transaction (engine process, counted in Client.query)', 'count', 'per step'], rows));
if (tracking) {
  out('');
  out(markdownTable(['pg_stat_statements, top level, by calls', 'calls', 'per step'], topByCalls.map((r) => [r.query.slice(0, 90), fmt(Number(r.calls)), fmt(Number(r.calls) / steps, 3)])));
  out('');
  out('Execution time (nested statements count inside the function that ran them, so the rows overlap):');
  out('');
  out(markdownTable(['pg_stat_statements, every level, by time', 'calls', 'µs per step'], byTime.map((r) => [r.query.slice(0, 90), fmt(Number(r.calls)), fmt((r.ms * 1000) / steps, 1)])));
}
