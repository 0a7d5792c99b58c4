import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { expect, it } from 'vitest';
import { begin, onOutcome } from '../../engine/core/flow.ts';
import { initialCtx, type Instance } from '../../engine/core/instance.ts';
import { rewind } from '../../engine/core/verbs.ts';
import { claimWorkflows } from '../../engine/store/claim-workflows.ts';
import { commitTransition } from '../../engine/store/commit-transition.ts';
import { type Db, openDb } from '../../engine/store/db.ts';
import { insertWorkflow } from '../../engine/store/insert-workflow.ts';
import { loadWorkflow } from '../../engine/store/load-workflow.ts';
import { publishLogicVersion } from '../../engine/store/logic-versions.ts';
import { dropSchema, migrate } from '../../engine/store/migrate.ts';
import type { Stored } from '../../engine/store/rows.ts';
import type { Transition } from '../../engine/core/transition.ts';
import { inEnv } from '../../engine/store/tx.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { DRIVERS, describeEachDriver } from '../support/db.ts';
import { newInstance } from '../../engine/runtime/start-instance.ts';

const logic = makeLogic({
  logicId: 'store.outputs',
  start: 's0',
  steps: { s0: { kind: 'proxy', path: '/a', next: 's1' }, s1: { kind: 'proxy', path: '/b', next: 's2' }, s2: { kind: 'proxy', path: '/c' } },
});
const ENV = 'env-outputs';
const LEASE = 30_000;

function fresh(): Instance {
  return newInstance(logic, { env: ENV, input: {}, correlationId: null });
}

// Migration 0011: each output is a row of workflow_outputs, written by the commit that set it and
// by no later one; every read puts the outputs back into ctx.outputs.
describeEachDriver('step outputs are stored once', (getDb) => {
  async function claimedNew(): Promise<Stored> {
    const inst = fresh();
    const t = await begin(logic, inst);
    await inEnv(getDb(), ENV, async (c) => {
      await publishLogicVersion(c, ENV, logic).catch(() => false);
      await insertWorkflow(c, t, { idempotencyKey: null });
    });
    const [stored] = await claimWorkflows(getDb().pool, { limit: 1, leaseMs: LEASE });
    expect(stored?.instance.id).toBe(inst.id);
    return stored!;
  }

  /** Succeeds the running step with `{ step }` and commits with the lease kept (or let go at the end). */
  async function succeed(stored: Stored): Promise<Stored> {
    const step = stored.instance.currentStep!;
    const t = await onOutcome(logic, stored.instance, { status: 'succeeded', output: { step } }, true);
    const keep = t.instance.state === 'processing' ? { token: stored.leaseToken!, ttlMs: LEASE } : null;
    expect(await commitTransition(getDb(), stored, t, { keepLease: keep, by: stored.leaseToken! })).toBe(true);
    return { instance: t.instance, rowVersion: stored.rowVersion + 1, leaseToken: stored.leaseToken, wakes: [] };
  }

  /** Each output row's transaction id (xmin): it changes only when the row is written again. */
  async function outputRows(id: string): Promise<Record<string, { xmin: string; output: unknown }>> {
    const res = await inEnv(getDb(), ENV, (c) =>
      c.query<{ step: string; xmin: string; output: unknown }>('SELECT step, xmin::text, output FROM workflow_outputs WHERE workflow_id = $1', [id]),
    );
    return Object.fromEntries(res.rows.map((r) => [r.step, { xmin: r.xmin, output: r.output }]));
  }

  it('a step commit writes its own output row and leaves the earlier ones and the row ctx alone', async () => {
    let stored = await succeed(await claimedNew());
    const id = stored.instance.id;
    const afterS0 = await outputRows(id);
    expect(Object.keys(afterS0)).toEqual(['s0']);
    stored = await succeed(stored);
    stored = await succeed(stored);
    expect(stored.instance.state).toBe('completed');
    const afterAll = await outputRows(id);
    expect(Object.keys(afterAll).sort()).toEqual(['s0', 's1', 's2']);
    // written once, by s0's commit: a later commit that rewrote every output would move its xmin
    expect(afterAll['s0']!.xmin).toBe(afterS0['s0']!.xmin);
    const row = await getDb().pool.query<{ ctx: Record<string, unknown> }>('SELECT ctx FROM workflows WHERE id = $1', [id]);
    expect(row.rows[0]!.ctx).not.toHaveProperty('outputs');
    const loaded = await inEnv(getDb(), ENV, (c) => loadWorkflow(c, id));
    expect(loaded!.instance.ctx.outputs).toEqual({ s0: { step: 's0' }, s1: { step: 's1' }, s2: { step: 's2' } });
  });

  it('replay-from-step forgets the outputs from that step on, and a reload does not bring them back', async () => {
    let stored = await claimedNew();
    for (let i = 0; i < 3; i++) stored = await succeed(stored);
    const id = stored.instance.id;
    const from = (await inEnv(getDb(), ENV, (c) => loadWorkflow(c, id)))!;
    const t = await rewind(logic, from.instance, 'verb.replay_from', { step: 's1' });
    expect(t.instance.ctx.outputs).toEqual({ s0: { step: 's0' } });
    expect(await commitTransition(getDb(), from, t, { keepLease: null })).toBe(true);
    expect(Object.keys(await outputRows(id))).toEqual(['s0']);
    const reloaded = await inEnv(getDb(), ENV, (c) => loadWorkflow(c, id));
    expect(reloaded!.instance.ctx.outputs).toEqual({ s0: { step: 's0' } });
    // the worker that claims it next sees the same
    const [claimed] = await claimWorkflows(getDb().pool, { limit: 1, leaseMs: LEASE });
    expect(claimed!.instance.id).toBe(id);
    expect(claimed!.instance.ctx.outputs).toEqual({ s0: { step: 's0' } });
  });

  // Migration 0014: a new output is a plain INSERT, a changed one an UPDATE, and the attempts one
  // MERGE; each write must land on the row it names. A commit built on a view of the instance the
  // store does not share raises (data_exception, or the key's unique_violation) and writes nothing.
  it('a commit whose writes do not fit the stored rows raises, and nothing of it is written', async () => {
    const stored = await succeed(await claimedNew());
    const id = stored.instance.id;
    const step = async () => onOutcome(logic, stored.instance, { status: 'succeeded', output: { step: 's1' } }, true);
    const keep = { token: stored.leaseToken!, ttlMs: LEASE };
    // on a held connection (as the worker pool's batcher does): a failed statement through
    // pool.query would drop PGlite's one session
    const commit = (from: Stored, t: Transition) => inEnv(getDb(), ENV, (c) => commitTransition(c, from, t, { keepLease: keep }));
    const cases: [string, () => Promise<boolean>][] = [
      // believes s1 already has an output row: its output would be an update of nothing
      ['replaced output without a row', async () => {
        const believes = { ...stored, instance: { ...stored.instance, ctx: { ...stored.instance.ctx, outputs: { ...stored.instance.ctx.outputs, s1: 1 } } } };
        return commit(believes, await step());
      }],
      // never saw s0's output: writing it again would be an insert of a row that is there
      ['added output with a row', async () => {
        const blind = { ...stored, instance: { ...stored.instance, ctx: { ...stored.instance.ctx, outputs: {} } } };
        const t = await step();
        t.outputsChanged.push('s0');
        return commit(blind, t);
      }],
      ['finish of an attempt without a row', async () => {
        const t = await step();
        t.attempts.push({ op: 'finish', seq: 999, state: 'succeeded', output: null, error: null });
        return commit(stored, t);
      }],
      ['insert of an attempt that has a row', async () => {
        const t = await step();
        const prepared = t.attempts.find((a) => a.op === 'insert')!;
        t.attempts.push({ ...prepared, seq: stored.instance.ctx.running!.seq });
        return commit(stored, t);
      }],
    ];
    const before = await outputRows(id);
    for (const [name, attempt] of cases) {
      const err = await attempt().then(() => ({ code: 'committed' }), (e: { code?: string }) => e);
      expect(`${name}: ${err.code}`).toMatch(/: (22000|23505)$/);
      const now = (await inEnv(getDb(), ENV, (c) => loadWorkflow(c, id)))!;
      expect(now.rowVersion, name).toBe(stored.rowVersion);
      expect(await outputRows(id), name).toEqual(before);
    }
    // the same step from the store's own view commits
    expect(await commit(stored, await step())).toBe(true);
  });
});

for (const driver of DRIVERS) {
  it(`[${driver}] migration 0011 moves the outputs an instance held in its ctx into workflow_outputs`, async () => {
    const schema = `flow_test_m11_${randomUUID().slice(0, 8)}`;
    const db = await openDb(driver === 'postgres' ? process.env['DATABASE_URL'] : undefined, { schema });
    try {
      await migrateBefore(db, '0011');
      const id = randomUUID();
      const ctx = { ...initialCtx(), outputs: { a: { n: 1 }, b: null, 'c d': [1, 'x'] }, order: ['a', 'b', 'c d'] };
      await db.pool.query(
        `INSERT INTO workflows (id, env_id, domain, logic_id, version, logic_hash, state, input, current_step, ctx)
         VALUES ($1, $2, 'test', $3, 1, $4, 'waiting', '{}', 's1', $5)`,
        [id, ENV, logic.logicId, logic.hash, JSON.stringify(ctx)],
      );
      expect(await migrate(db)).toEqual(readdirSync(new URL('../../engine/store/migrations/', import.meta.url)).filter((f) => f >= '0011').sort());
      const raw = await db.pool.query<{ ctx: Record<string, unknown> }>('SELECT ctx FROM workflows WHERE id = $1', [id]);
      expect(raw.rows[0]!.ctx).not.toHaveProperty('outputs');
      const loaded = await inEnv(db, ENV, (c) => loadWorkflow(c, id));
      expect(loaded!.instance.ctx).toEqual(ctx);
    } finally {
      await dropSchema(db);
      await db.close();
    }
  });
}

/** Applies the migrations numbered below `upTo`, as migrate() would have before it existed. */
async function migrateBefore(db: Db, upTo: string): Promise<void> {
  const dir = new URL('../../engine/store/migrations/', import.meta.url);
  const c = await db.pool.connect();
  try {
    await c.query(`CREATE SCHEMA IF NOT EXISTS ${db.schema}; SET search_path TO ${db.schema}`);
    await c.query('CREATE TABLE schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())');
    for (const file of readdirSync(dir).filter((f) => /^\d{4}_.+\.sql$/.test(f) && f < upTo).sort()) {
      await c.query(readFileSync(new URL(file, dir), 'utf8'));
      await c.query('INSERT INTO schema_migrations (name) VALUES ($1)', [file]);
    }
  } finally {
    c.release();
  }
}
