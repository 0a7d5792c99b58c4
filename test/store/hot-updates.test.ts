import { expect, it } from 'vitest';
import { begin, onOutcome } from '../../engine/core/flow.ts';
import { claimWorkflows, heartbeats } from '../../engine/store/claim-workflows.ts';
import { commitTransition } from '../../engine/store/commit-transition.ts';
import { insertWorkflow } from '../../engine/store/insert-workflow.ts';
import { publishLogicVersion } from '../../engine/store/logic-versions.ts';
import type { Stored } from '../../engine/store/rows.ts';
import { asScheduler, type Client, inEnv } from '../../engine/store/tx.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { newInstance } from '../../engine/runtime/start-instance.ts';

const logic = makeLogic({
  logicId: 'store.hot',
  start: 's0',
  steps: { s0: { kind: 'proxy', path: '/a', next: 's1' }, s1: { kind: 'proxy', path: '/b', next: 's2' }, s2: { kind: 'proxy', path: '/c' } },
});

/**
 * Updates of `workflows` that `write` made, and how many of them were heap-only (in place). The
 * session's counters hold what it has not yet reported, earlier transactions included: a delta.
 */
async function updates(c: Client, write: () => Promise<void>): Promise<{ all: number; hot: number }> {
  const read = async () =>
    (
      await c.query<{ all: number; hot: number }>(
        `SELECT pg_stat_get_xact_tuples_updated('workflows'::regclass)::int AS all,
                pg_stat_get_xact_tuples_hot_updated('workflows'::regclass)::int AS hot`,
      )
    ).rows[0]!;
  const before = await read();
  await write();
  const after = await read();
  return { all: after.all - before.all, hot: after.hot - before.hot };
}

// Migration 0010: a step's commit and a heartbeat change no indexed column, so Postgres updates
// the row in place — no new entry in any of the table's indexes, far less WAL.
describeEachDriver('step commits update the workflow row in place', (getDb) => {
  async function claimed(): Promise<Stored> {
    const env = 'env-hot';
    const inst = newInstance(logic, { env, input: {}, correlationId: null });
    const t = await begin(logic, inst);
    await inEnv(getDb(), env, async (c) => {
      await publishLogicVersion(c, env, logic).catch(() => false);
      await insertWorkflow(c, t, { idempotencyKey: null });
    });
    const [stored] = await claimWorkflows(getDb().pool, { limit: 1, leaseMs: 30_000 });
    expect(stored?.instance.id).toBe(inst.id);
    return stored!;
  }

  it('a step that succeeds and keeps the lease is a heap-only update, and so is a heartbeat', async () => {
    let stored = await claimed();
    const token = stored.leaseToken!;
    for (const step of ['s0', 's1']) {
      expect(stored.instance.currentStep).toBe(step);
      const t = await onOutcome(logic, stored.instance, { status: 'succeeded', output: { step } }, true);
      expect(t.instance.state).toBe('processing');
      const counted = await inEnv(getDb(), stored.instance.env, (c) =>
        updates(c, async () => {
          expect(await commitTransition(c, stored, t, { keepLease: { token, ttlMs: 30_000 }, by: token })).toBe(true);
        }),
      );
      expect(counted, `commit of ${step}`).toEqual({ all: 1, hot: 1 });
      stored = { instance: t.instance, rowVersion: stored.rowVersion + 1, leaseToken: token, wakes: [] };
    }
    const beat = await asScheduler(getDb(), (c) =>
      updates(c, async () => {
        expect(await heartbeats(c, { ids: [stored.instance.id], tokens: [token], leaseMs: 30_000 })).toEqual(new Set());
      }),
    );
    expect(beat).toEqual({ all: 1, hot: 1 });
  });
});
