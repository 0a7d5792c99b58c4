import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { begin, onOutcome } from '../../engine/core/flow.ts';
import { newInstance } from '../../engine/runtime/start-instance.ts';
import { claimWorkflows } from '../../engine/store/claim-workflows.ts';
import { commitTransition } from '../../engine/store/commit-transition.ts';
import { insertWorkflow } from '../../engine/store/insert-workflow.ts';
import { publishLogicVersion } from '../../engine/store/logic-versions.ts';
import { advanceClock, fireDueTimers } from '../../engine/store/timers.ts';
import type { Db } from '../../engine/store/db.ts';
import { asScheduler, type Client, inEnv } from '../../engine/store/tx.ts';
import type { LogicVersion } from '../../contracts/index.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { closeTestDb, openTestDb } from '../support/db.ts';

const ENV = 'env-plans';
const proxy = makeLogic({ logicId: 'store.plans.proxy', start: 's0', steps: { s0: { kind: 'proxy', path: '/a' } } });
const delay = (logicId: string, duration: string) =>
  makeLogic({ logicId, start: 'wait', steps: { wait: { kind: 'delay', duration, next: 'after' }, after: { kind: 'proxy', path: '/a' } } });
const shortDelay = delay('store.plans.short', 'PT10M');
const longDelay = delay('store.plans.long', 'P1D');

/** The plans auto_explain handed client `c` for the statements `work` ran, nested ones included. */
async function plansOf(c: Client, work: () => Promise<void>): Promise<string[]> {
  const plans: string[] = [];
  const collect = (msg: { message?: string }) => {
    if (msg.message?.includes('Query Text:')) plans.push(msg.message);
  };
  await c.query(`LOAD 'auto_explain'`);
  await c.query(`SET auto_explain.log_min_duration = 0`);
  await c.query(`SET auto_explain.log_nested_statements = on`);
  await c.query(`SET auto_explain.log_level = 'notice'`);
  c.on('notice', collect);
  try {
    await work();
  } finally {
    c.off('notice', collect);
    await c.query(`SET auto_explain.log_min_duration = -1`);
  }
  return plans;
}

/**
 * How the plans that ran during `work` on client `c` read workflow_outputs: sequential scans, and
 * scans of its primary key. auto_explain hands the client the plan of every statement, nested
 * ones (inside the claim and poll functions) included, as it ran: a cached generic plan shows as
 * itself. Unlike the statistics counters (pg_stat_get_xact_numscans), which another backend's
 * flush can move between two reads, a plan says only what this session did.
 */
async function outputScans(c: Client, work: () => Promise<void>): Promise<{ seq: number; byKey: number }> {
  const nodes = (await plansOf(c, work)).flatMap((p) => p.split('\n'));
  return {
    seq: nodes.filter((l) => /Seq Scan on workflow_outputs\b/.test(l)).length,
    byKey: nodes.filter((l) => /(Index|Index Only|Bitmap Index) Scan (using|on) workflow_outputs_pkey\b/.test(l)).length,
  };
}

// Migration 0017: a claim and a timer poll read each leased instance's outputs from
// workflow_outputs. Their functions kept a generic plan made when the statistics said the table
// was empty, and went on reading all of it for every instance after it had grown (bench:timers:
// 16 ms a claim of 32). Planned on every call (with_outputs()), it goes through the primary key.
// Postgres only: plans are kept per session, and PGlite's one session serves the whole pool.
describe.skipIf(!process.env['DATABASE_URL'])('a claim and a timer poll find outputs by key whatever the statistics said [postgres]', () => {
  let db: Db;
  beforeAll(async () => {
    db = await openTestDb('postgres');
  });
  afterAll(async () => {
    await closeTestDb(db);
  });

  async function insert(logic: LogicVersion): Promise<string> {
    const t = await begin(logic, newInstance(logic, { env: ENV, input: {}, correlationId: null }));
    await inEnv(db, ENV, async (c) => {
      await publishLogicVersion(c, ENV, logic).catch(() => false);
      await insertWorkflow(c, t, { idempotencyKey: null });
    });
    return t.instance.id;
  }

  it('after six calls against an analyzed empty table, the lookups still use the primary key', async () => {
    // the statistics say empty, and no autovacuum corrects them during the test
    await db.pool.query('ALTER TABLE workflow_outputs SET (autovacuum_enabled = false)');
    await db.pool.query('ANALYZE workflow_outputs');
    const c = await db.pool.connect();
    try {
      // a function's statements get a generic plan from their sixth call on, kept for the session;
      // the lookup runs only for a claim or poll that leases something, so each of these does
      for (let i = 0; i < 6; i++) {
        const claimable = await insert(proxy);
        expect((await claimWorkflows(c, { limit: 1, leaseMs: 30_000 })).map((s) => s.instance.id)).toEqual([claimable]);
        const parked = await insert(shortDelay);
        await asScheduler(db, (s) => advanceClock(s, 11 * 60_000));
        expect((await fireDueTimers(c, 10, { limit: 1, leaseMs: 30_000 })).leased.map((s) => s.instance.id)).toEqual([parked]);
      }
      // workflow_outputs grows: 3,000 outputs of an instance nobody claims or wakes here
      const filler = await insert(longDelay);
      await asScheduler(db, (s) =>
        s.query(
          `INSERT INTO workflow_outputs (env_id, workflow_id, step, output)
           SELECT $1, $2, 'step' || g, jsonb_build_object('n', g, 'pad', repeat('x', 100)) FROM generate_series(1, 3000) g`,
          [ENV, filler],
        ),
      );

      const claimable = await insert(proxy);
      const claim = await outputScans(c, async () => {
        const claimed = await claimWorkflows(c, { limit: 1, leaseMs: 30_000 });
        expect(claimed.map((s) => s.instance.id)).toEqual([claimable]);
      });
      expect(claim, 'the claim').toEqual({ seq: 0, byKey: 1 });

      const parked = await insert(shortDelay);
      await asScheduler(db, (s) => advanceClock(s, 11 * 60_000));
      const poll = await outputScans(c, async () => {
        const fired = await fireDueTimers(c, 10, { limit: 1, leaseMs: 30_000 });
        expect(fired.leased.map((s) => s.instance.id)).toEqual([parked]);
      });
      expect(poll, 'the timer poll').toEqual({ seq: 0, byKey: 1 });
    } finally {
      c.release();
    }
  });
});


// Migration 0040: a step's commit updated its row `WHERE id = … AND state = fromState`, and row
// security adds the env. Before the table had statistics the planner took the partial index on
// (env, …, state) over the primary key, and each commit walked the env's instances in flight.
// And write_effects_at()'s statements on the partitioned step_runs got a custom plan, planned
// again on every commit (a generic one cannot prune partitions at plan time, so it looked dearer).
describe.skipIf(!process.env['DATABASE_URL'])('a step commit finds its row by id and is planned once [postgres]', () => {
  let db: Db;
  beforeAll(async () => {
    db = await openTestDb('postgres');
  });
  afterAll(async () => {
    await closeTestDb(db);
  });

  it('with 200 instances in flight and no statistics: the primary key, and a generic plan', async () => {
    const env = 'env-commit-plans';
    const chain = makeLogic({ logicId: 'store.plans.chain', start: 's0', steps: { s0: { kind: 'proxy', path: '/a', next: 's1' }, s1: { kind: 'proxy', path: '/b' } } });
    await db.pool.query('ALTER TABLE workflows SET (autovacuum_enabled = false)');
    await inEnv(db, env, async (c) => {
      await publishLogicVersion(c, env, chain);
      for (let i = 0; i < 200; i++) await insertWorkflow(c, await begin(chain, newInstance(chain, { env, input: {}, correlationId: null })), { idempotencyKey: null });
    });
    const claimed = await claimWorkflows(db.pool, { limit: 200, leaseMs: 60_000 });
    expect(claimed).toHaveLength(200);
    const c = await db.pool.connect();
    try {
      const commit = async (stored: (typeof claimed)[number]) => {
        const t = await onOutcome(chain, stored.instance, { status: 'succeeded', output: {} }, true);
        const token = stored.leaseToken!;
        await c.query('SELECT set_config($1, $2, false)', ['app.env_id', env]);
        expect(await commitTransition(c, stored, t, { keepLease: { token, ttlMs: 60_000 }, by: token })).toBe(true);
      };
      // past the five custom plans a cached statement gets before Postgres weighs a generic one
      for (const stored of claimed.slice(0, 7)) await commit(stored);
      const plans = await plansOf(c, () => commit(claimed[7]!));
      const update = plans.find((p) => /Query Text: UPDATE workflows SET/.test(p));
      expect(update, 'the commit ran its UPDATE').toBeDefined();
      expect(update).toMatch(/Index Scan using workflows_pkey on workflows/);
      expect(update).not.toMatch(/Rows Removed by Filter/);
      const attempts = plans.find((p) => /Query Text: MERGE INTO step_runs/.test(p));
      expect(attempts, 'the commit wrote its attempts').toBeDefined();
      // a custom plan carries this commit's values as literals; the generic one, parameters
      expect(attempts).not.toContain(claimed[7]!.instance.id);
    } finally {
      c.release();
    }
  });
});
