/**
 * Retention on a large history: `STEPS` steps of ended instances (10 attempts and 10 journal
 * rows each), generated with generate_series straight into the week partitions, spread over
 * eight weeks long past their retention, plus one small week that still holds a live instance
 * (so both paths run: whole weeks dropped, the rest deleted row by row). One retention run
 * reports pg_total_relation_size of the history before and after, and the step-commit rate of a
 * live workload (10-step proxy chains at concurrency 16) during the run against the same
 * workload without it, side by side.
 *
 *   npx tsx bench/retention.bench.ts [--quick]   (needs DATABASE_URL; `npm run bench` runs it)
 *
 * Full: 10,000,000 steps (about 6 GB of history: give the server the disk). Quick: 200,000.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { LogicVersion, StepDef } from '../contracts/index.ts';
import { Engine } from '../engine/runtime/engine.ts';
import { Retention, type RetentionReport } from '../engine/runtime/retention.ts';
import { openDb } from '../engine/store/db.ts';
import { dropSchema, migrate } from '../engine/store/migrate.ts';
import { makeLogic } from '../test/contracts/helpers.ts';
import { fmt, minimalService, reportGoal } from './support.ts';

const url = process.env['DATABASE_URL'];
if (!url) throw new Error('set DATABASE_URL (npm run bench starts a Postgres for you)');
const QUICK = process.argv.includes('--quick');
const STEPS = Number(process.env['BENCH_HISTORY_STEPS'] ?? (QUICK ? 200_000 : 10_000_000));
const STEPS_PER_INSTANCE = 10;
const WEEKS = 8;
const CONCURRENCY = 16;
const WINDOW_MS = QUICK ? 4_000 : 10_000;
const out = (s: string) => process.stdout.write(`${s}\n`);
const DAY = 86_400_000;

function chain(logicId: string): LogicVersion {
  const steps: Record<string, StepDef> = {};
  for (let i = 0; i < STEPS_PER_INSTANCE; i++) steps[`s${i}`] = { kind: 'proxy', path: '/step', ...(i + 1 < STEPS_PER_INSTANCE ? { next: `s${i + 1}` } : {}) };
  return makeLogic({ logicId, domain: 'bench', start: 's0', steps });
}

let stop = false;
let feeder: Promise<void> | undefined;
const db = await openDb(url, { schema: `flow_bench_retention_${randomBytes(4).toString('hex')}`, poolSize: CONCURRENCY + 8 });
const service = await minimalService();
try {
  await migrate(db);
  let committed = 0;
  const engine = new Engine({
    db,
    executors: { handlers: new Map([['BENCH', { url: service.url }]]) },
    worker: { concurrency: CONCURRENCY, pollMs: 20 },
    observer: { onTransition: (_from, _t, ok) => void (ok && committed++) },
  });
  const old = chain('bench.history');
  const live = chain('bench.live');
  await engine.publish(old);
  await engine.publish(live);

  // the history: ended instances 20 to 13 weeks old, each with its attempts and journal rows in its week's partition
  const instances = Math.ceil(STEPS / STEPS_PER_INSTANCE);
  const since = new Date(Date.now() - 20 * 7 * DAY);
  const t0 = performance.now();
  await db.pool.query('SELECT ensure_history_partitions($1, now())', [since]);
  const c = await db.pool.connect();
  try {
    await c.query("BEGIN; SELECT set_config('role', 'flow_engine', true)");
    await c.query(
      `INSERT INTO workflows (id, env_id, domain, logic_id, version, logic_hash, state, input, output, current_step, ctx, created_at, updated_at)
       SELECT gen_random_uuid(), 'default', 'bench', $1, 1, $2, 'completed', jsonb_build_object('account', 'acct-' || g), '{"ok":true}', 's9', '{}', t, t + interval '1 minute'
       FROM generate_series(1, $3::int) g, LATERAL (SELECT $4::timestamptz + (g % $5) * interval '7 days' + (g % 5000) * interval '1 minute' AS t) x`,
      [old.logicId, old.hash, instances, since, WEEKS],
    );
    // a small week with one instance still waiting: its rows go by delete, its partitions stay
    const small = new Date(since.getTime() + WEEKS * 7 * DAY);
    await c.query(
      `INSERT INTO workflows (id, env_id, domain, logic_id, version, logic_hash, state, input, output, current_step, ctx, created_at, updated_at)
       SELECT gen_random_uuid(), 'default', 'bench', $1, 1, $2, CASE WHEN g = 1 THEN 'waiting' ELSE 'completed' END, '{}', '{"ok":true}', 's9', '{}', $3, $3
       FROM generate_series(1, 500) g`,
      [old.logicId, old.hash, small],
    );
    for (const [table, row] of [
      ['journal (env_id, workflow_id, n, from_state, event, decision, at, born)',
        `'default', w.id, s, 'processing', jsonb_build_object('type', 'attempt', 'outcome', jsonb_build_object('status', 'succeeded', 'output', jsonb_build_object('ok', true, 'account', w.input->'account'))),
         jsonb_build_object('state', 'pending', 'cause', 'attempt', 'currentStep', 's' || s), w.created_at, w.created_at`],
      ['step_runs (env_id, workflow_id, seq, step, attempt, generation, kind, state, input, output, idempotency_key, started_at, finished_at, born)',
        `'default', w.id, s, 's' || s, 1, 0, 'step', 'succeeded', w.input, '{"ok":true}', w.id || ':s' || s || ':0', w.created_at, w.created_at, w.created_at`],
    ] as const) {
      await c.query(`INSERT INTO ${table} SELECT ${row} FROM workflows w, generate_series(0, ${STEPS_PER_INSTANCE - 1}) s WHERE w.logic_id = $1`, [old.logicId]);
    }
    await c.query('COMMIT');
    await c.query('ANALYZE');
  } finally {
    c.release();
  }
  out(`retention bench${QUICK ? ' --quick' : ''}: ${fmt(instances * STEPS_PER_INSTANCE)} steps of history (${fmt(instances)} instances over ${WEEKS} weeks + 500 in a week with a live one), generated in ${fmt((performance.now() - t0) / 1000, 1)} s`);

  // the live workload: chains started faster than they finish, so the pool never runs dry
  await engine.workers.start();
  feeder = (async () => {
    while (!stop) {
      const waiting = (await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM workflows WHERE state IN ('pending', 'processing') AND logic_id = $1", [live.logicId])).rows[0]!.n;
      if (waiting < CONCURRENCY * 4) await Promise.all(Array.from({ length: CONCURRENCY * 2 }, () => engine.start({ logicId: live.logicId, input: {} })));
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  const rate = async (during: () => Promise<void>) => {
    const from = committed;
    const t = performance.now();
    await during();
    const ms = performance.now() - t;
    return { perSec: ((committed - from) * 1000) / ms, ms };
  };
  await new Promise((r) => setTimeout(r, 1_000));
  const without = await rate(() => new Promise((r) => setTimeout(r, WINDOW_MS)));
  const retention = new Retention(db, { days: 30, envDays: {} });
  const reports: (RetentionReport | null)[] = [];
  const withRun = await rate(async () => {
    reports.push(await retention.run());
  });
  stop = true;
  await feeder;
  await engine.close();
  const r = reports[0];
  if (!r) throw new Error('another node held the retention lock');
  const mb = (b: number) => `${fmt(b / 1024 / 1024, 1)} MB`;
  out(`  retention run: ${fmt(withRun.ms / 1000, 2)} s, ${fmt(r.instancesRemoved)} instances removed, ${r.partitionsDropped.length} partitions dropped`);
  out(`  history on disk (pg_total_relation_size): ${mb(r.bytesBefore)} before, ${mb(r.bytesAfter)} after, ${mb(r.bytesFreed)} freed`);
  out(`  live step commits/s: ${fmt(without.perSec)} without a retention run (${fmt(without.ms / 1000, 1)} s), ${fmt(withRun.perSec)} during it`);
  reportGoal({
    case: `retention of ${fmt(instances * STEPS_PER_INSTANCE)} steps`,
    clients: `${CONCURRENCY} live`,
    result: `${mb(r.bytesFreed)} freed (${mb(r.bytesBefore)} → ${mb(r.bytesAfter)}) in ${fmt(withRun.ms / 1000, 1)} s`,
    vs: `${fmt(withRun.perSec)} commits/s during vs ${fmt(without.perSec)} without`,
    goal: `disk freed: ${r.bytesFreed > 0 ? 'met' : '**missed**'}`,
  });
} finally {
  stop = true;
  await feeder?.catch(() => {});
  await service.close();
  await dropSchema(db);
  await db.close();
}
