/**
 * The cost of a transaction-mode pooler: proxy steps/s with the engine's connections through
 * PgBouncer 1.18 (`?pgbouncer=true`: unnamed statements, LISTEN on a direct connection) against
 * the same engine connected directly, side by side in one run on one Postgres.
 *
 *   npx tsx bench/pooler.bench.ts [--quick]     (needs DATABASE_URL; `npm run bench` runs it)
 *
 * It starts its PgBouncer through scripts/with-pgbouncer.sh (re-running itself under it).
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import type { LogicVersion, StepDef } from '../contracts/index.ts';
import { Engine } from '../engine/runtime/engine.ts';
import { openDb } from '../engine/store/db.ts';
import { dropSchema, migrate } from '../engine/store/migrate.ts';
import { makeLogic } from '../test/contracts/helpers.ts';
import { fmt, median, pool, reportGoal, serviceProcess } from './support.ts';
import { Watch } from './watch.ts';

const url = process.env['DATABASE_URL'];
if (!url) throw new Error('set DATABASE_URL (npm run bench starts a Postgres for you)');
const pooledUrl = process.env['FLOW_TEST_PGBOUNCER_URL'];
if (!pooledUrl) {
  const script = fileURLToPath(new URL('../scripts/with-pgbouncer.sh', import.meta.url));
  const run = spawnSync('bash', [script, process.execPath, '--import', 'tsx', fileURLToPath(import.meta.url), ...process.argv.slice(2)], { stdio: 'inherit' });
  process.exit(run.status ?? 1);
}
const QUICK = process.argv.includes('--quick');
const WORKFLOWS = QUICK ? 200 : 600;
const ROUNDS = QUICK ? 1 : 3;
const STEPS = 10;
const CONCURRENCY = 16;
const out = (s: string) => process.stdout.write(`${s}\n`);

function chain(): LogicVersion {
  const steps: Record<string, StepDef> = {};
  for (let i = 0; i < STEPS; i++) steps[`s${i}`] = { kind: 'proxy', path: '/step', ...(i + 1 < STEPS ? { next: `s${i + 1}` } : {}) };
  return makeLogic({ logicId: 'bench.pooled', domain: 'bench', start: 's0', steps });
}

async function admin(sql: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query(sql);
  await c.end();
}

/** Proxy steps/s of WORKFLOWS instances started before the workers, through `via`. */
async function rate(via: 'direct' | 'pgbouncer', serviceUrl: string): Promise<number> {
  const schema = `bench_pool_${randomBytes(4).toString('hex')}`;
  let connect = url!;
  if (via === 'pgbouncer') {
    await admin(`CREATE ROLE ${schema} LOGIN SUPERUSER; ALTER ROLE ${schema} SET search_path = ${schema}`);
    const u = new URL(pooledUrl!);
    u.username = schema;
    connect = u.toString();
  }
  const open = () => openDb(connect, { schema, poolSize: CONCURRENCY + 4, ...(via === 'pgbouncer' ? { listenUrl: url! } : {}) });
  const engineOn = (db: Awaited<ReturnType<typeof open>>, watch?: Watch) =>
    new Engine({ db, executors: { handlers: new Map([['BENCH', { url: serviceUrl }]]) }, worker: { concurrency: CONCURRENCY, pollMs: 20 }, ...(watch ? { observer: watch } : {}) });
  const logic = chain();
  const setup = await open();
  await migrate(setup);
  await engineOn(setup).publish(logic);
  const starter = engineOn(setup);
  const startAll = (n: number) =>
    pool(n, 16, async () => {
      await starter.start({ logicId: logic.logicId, input: {} });
    });
  // warm: the server connections and their plans, as a long-running engine has them
  await startAll(50);
  const warmWatch = new Watch();
  const warm = engineOn(setup, warmWatch);
  await warm.workers.start();
  await warmWatch.until(50);
  await warm.close();
  await startAll(WORKFLOWS);
  const watch = new Watch();
  const engine = engineOn(setup, watch);
  const t0 = performance.now();
  await engine.workers.start();
  await watch.until(WORKFLOWS);
  const seconds = (performance.now() - t0) / 1000;
  await engine.close();
  await dropSchema(setup);
  await setup.close();
  if (via === 'pgbouncer') await admin(`DROP ROLE IF EXISTS ${schema}`).catch(() => {});
  return (WORKFLOWS * STEPS) / seconds;
}

const service = await serviceProcess();
const ratios: number[] = [];
const rates: Record<'direct' | 'pgbouncer', number[]> = { direct: [], pgbouncer: [] };
for (let r = 0; r < ROUNDS; r++) {
  const order = r % 2 === 0 ? (['direct', 'pgbouncer'] as const) : (['pgbouncer', 'direct'] as const);
  const round: Partial<Record<'direct' | 'pgbouncer', number>> = {};
  for (const via of order) round[via] = await rate(via, service.url);
  rates.direct.push(round.direct!);
  rates.pgbouncer.push(round.pgbouncer!);
  ratios.push(round.pgbouncer! / round.direct!);
}
await service.close();

out(`pooler${QUICK ? ' --quick' : ''}: ${WORKFLOWS} workflows × ${STEPS} proxy steps, ${CONCURRENCY} workers, ${ROUNDS === 1 ? '1 round' : `median of ${ROUNDS} rounds`}`);
out(`direct ${fmt(median(rates.direct))} steps/s; through PgBouncer 1.18 (transaction mode, unnamed statements) ${fmt(median(rates.pgbouncer))} steps/s; ratio ${fmt(median(ratios), 2)}`);
reportGoal({
  case: 'engine: proxy steps through PgBouncer (transaction mode)',
  clients: `${CONCURRENCY}`,
  result: `${fmt(median(rates.pgbouncer))} steps/s (direct ${fmt(median(rates.direct))})`,
  vs: `${fmt(median(ratios), 2)} of direct`,
  goal: '',
});
