import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { isAllowedTransition, TRANSITION_CAUSES, TRANSITIONS, type TransitionCause, WORKFLOW_STATES, type WorkflowState } from '../../contracts/index.ts';
import { begin } from '../../engine/core/flow.ts';
import type { Instance } from '../../engine/core/instance.ts';
import { Draft } from '../../engine/core/transition.ts';
import { commitTransition } from '../../engine/store/commit-transition.ts';
import { openDb } from '../../engine/store/db.ts';
import { insertWorkflow } from '../../engine/store/insert-workflow.ts';
import { loadRecord, loadWorkflow } from '../../engine/store/load-workflow.ts';
import { findLogicVersion, publishLogicVersion } from '../../engine/store/logic-versions.ts';
import { dropSchema, migrate } from '../../engine/store/migrate.ts';
import { inEnv } from '../../engine/store/tx.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { statementsSent } from '../support/statements.ts';
import { newInstance } from '../../engine/runtime/start-instance.ts';

const logic = makeLogic({ logicId: 'store.flow', start: 'wait', steps: { wait: { kind: 'decision', options: ['go'] } } });

function instanceOf(env: string): Instance {
  return newInstance(logic, { env, input: {}, correlationId: null });
}

describeEachDriver('store', (getDb) => {
  async function createIn(env: string): Promise<string> {
    const t = await begin(logic, instanceOf(env));
    return inEnv(getDb(), env, async (c) => {
      await publishLogicVersion(c, env, logic).catch(() => false);
      return (await insertWorkflow(c, t, { idempotencyKey: null })).id;
    });
  }

  it('row-level security: env A can neither read nor update env B, and no env sees nothing', async () => {
    const a = await createIn('env-a');
    const b = await createIn('env-b');
    const seen = await inEnv(getDb(), 'env-a', async (c) => (await c.query<{ id: string }>('SELECT id FROM workflows')).rows.map((r) => r.id));
    expect(seen).toContain(a);
    expect(seen).not.toContain(b);
    const updated = await inEnv(getDb(), 'env-a', async (c) => (await c.query(`UPDATE workflows SET state = 'cancelled' WHERE id = $1`, [b])).rowCount);
    expect(updated).toBe(0);
    const steps = await inEnv(getDb(), 'env-a', async (c) => (await c.query('SELECT * FROM step_runs WHERE workflow_id = $1', [b])).rowCount);
    expect(steps).toBe(0);
    const db = getDb();
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`SELECT set_config('role', 'flow_app', true)`);
      expect((await client.query('SELECT id FROM workflows')).rowCount).toBe(0);
      expect((await client.query('SELECT * FROM logic_versions')).rowCount).toBe(0);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    await expect(
      inEnv(getDb(), 'env-a', (c) =>
        c.query(`INSERT INTO audit (env_id, workflow_id, verb, actor, before, after) VALUES ('env-b', $1, 'x', 'y', '{}', '{}')`, [b]),
      ),
    ).rejects.toMatchObject({ code: '42501' });
  });

  it("a record is read in one statement scoped to its env: another env's instance is not found there", async () => {
    const a = await createIn('env-rec-a');
    const db = getDb();
    const { sent } = await statementsSent(db, async () => {
      expect(await loadRecord(db, 'env-rec-a', a)).toMatchObject({ id: a, env: 'env-rec-a', state: 'waiting', steps: [{ step: 'wait', state: 'parked' }] });
      expect(await loadRecord(db, 'env-rec-b', a)).toBeNull();
    });
    const read = 'pool: SELECT workflow_record($1, $2) AS record';
    expect(sent).toEqual([read, 'client', read, 'client']);
    // and the caller's own scope is back after it, inside a transaction of the caller's
    const scope = await inEnv(db, 'env-rec-b', async (c) => {
      await c.query('SELECT workflow_record($1, $2)', [a, 'env-rec-a']);
      return (await c.query<{ env: string; r: string }>(`SELECT current_setting('app.env_id') AS env, current_setting('role') AS r`)).rows[0];
    });
    expect(scope).toEqual({ env: 'env-rec-b', r: 'flow_app' });
    await expect(loadRecord(db, 'bad\u0000env', a)).rejects.toMatchObject({ code: 'FLOW_BAD_ENV' });
  });

  it('an env name is data, whatever it holds: quotes and backslashes scope like any other name', async () => {
    const odd = "o'b\\x'); SELECT set_config('role', 'postgres', true); --";
    const mine = await createIn(odd);
    const other = await createIn('env-plain');
    const seen = await inEnv(getDb(), odd, async (c) => {
      const session = (await c.query<{ r: string; env: string }>(`SELECT current_setting('role') AS r, current_setting('app.env_id') AS env`)).rows[0]!;
      expect(session).toEqual({ r: "flow_app", env: odd });
      return (await c.query<{ id: string }>('SELECT id FROM workflows')).rows.map((r) => r.id);
    });
    expect(seen).toEqual([mine]);
    expect(seen).not.toContain(other);
  });

  it('the application roles own no table, and every table forces row-level security', async () => {
    const res = await getDb().pool.query<{ relname: string; owner: string; forced: boolean; enabled: boolean }>(
      `SELECT c.relname, pg_get_userbyid(c.relowner) AS owner, c.relforcerowsecurity AS forced, c.relrowsecurity AS enabled
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname <> 'schema_migrations'`,
      [getDb().schema],
    );
    expect(res.rows.length).toBeGreaterThanOrEqual(8);
    for (const row of res.rows) {
      expect(row.owner, row.relname).not.toMatch(/^flow_(app|engine)$/);
      expect(row.enabled && row.forced, row.relname).toBe(true);
    }
  });

  it('refuses to publish the same (logicId, version) with another hash; the same hash is a no-op', async () => {
    const env = 'env-pub';
    const v1 = makeLogic({ logicId: 'store.pub', start: 'p', steps: { p: { kind: 'pass' } } });
    const other = makeLogic({ logicId: 'store.pub', start: 'p', steps: { p: { kind: 'pass', input: '"changed"' } } });
    expect(await inEnv(getDb(), env, (c) => publishLogicVersion(c, env, v1))).toBe(true);
    expect(await inEnv(getDb(), env, (c) => publishLogicVersion(c, env, v1))).toBe(false);
    await expect(inEnv(getDb(), env, (c) => publishLogicVersion(c, env, other))).rejects.toMatchObject({ code: 'FLOW_VERSION_CONFLICT' });
    expect((await inEnv(getDb(), env, (c) => findLogicVersion(c, 'store.pub')))?.hash).toBe(v1.hash);
    await expect(inEnv(getDb(), env, (c) => c.query(`UPDATE logic_versions SET hash = 'x'`))).rejects.toMatchObject({ code: '42501' });
  });

  it('commits every (from, cause, to) triple of the table, and each one lands', async () => {
    const env = 'env-t';
    const landed: string[] = [];
    for (const { from, cause, to } of TRANSITIONS) {
      const id = await createIn(env);
      // put the row in `from` directly: the table, not the path that leads there, is under test
      await inEnv(getDb(), env, (c) => c.query('UPDATE workflows SET state = $2 WHERE id = $1', [id, from]));
      const stored = (await inEnv(getDb(), env, (c) => loadWorkflow(c, id)))!;
      expect(stored.instance.state).toBe(from);
      // goOn: a worker that keeps the lease, so the draft's hand-over rule leaves `to` as set
      const d = new Draft(logic, stored.instance, cause, true);
      d.instance.state = to;
      expect(await inEnv(getDb(), env, (c) => commitTransition(c, stored, d.done(), { keepLease: null })), `${from} -${cause}-> ${to}`).toBe(true);
      const after = (await inEnv(getDb(), env, (c) => loadWorkflow(c, id)))!;
      expect({ state: after.instance.state, moved: after.rowVersion > stored.rowVersion }, `${from} -${cause}-> ${to}`).toEqual({ state: to, moved: true });
      landed.push(`${from}|${cause}|${to}`);
    }
    expect(new Set(landed).size).toBe(TRANSITIONS.length);
  });

  it('refuses every (from, cause, to) outside the table, changing nothing', async () => {
    const id = await createIn('env-t');
    const stored = (await inEnv(getDb(), 'env-t', (c) => loadWorkflow(c, id)))!;
    let refused = 0;
    for (const from of WORKFLOW_STATES)
      for (const cause of TRANSITION_CAUSES)
        for (const to of WORKFLOW_STATES) {
          if (isAllowedTransition(from, cause, to)) continue;
          // goOn: a worker that keeps the lease, so the draft's hand-over rule leaves `to` as set
          const d = new Draft(logic, { ...stored.instance, state: from }, cause as TransitionCause, true);
          d.instance.state = to as WorkflowState;
          const fake = { ...stored, instance: { ...stored.instance, state: from } };
          await expect(inEnv(getDb(), 'env-t', (c) => commitTransition(c, fake, d.done(), { keepLease: null }))).rejects.toMatchObject({
            code: 'FLOW_TRANSITION_REFUSED',
          });
          refused++;
        }
    expect(refused).toBe(WORKFLOW_STATES.length ** 2 * TRANSITION_CAUSES.length - TRANSITIONS.length);
    expect((await inEnv(getDb(), 'env-t', (c) => loadWorkflow(c, id)))!.rowVersion).toBe(stored.rowVersion);
  });

  it('an allowed transition commits once; the same write again is fenced by row_version', async () => {
    const id = await createIn('env-occ');
    const stored = (await inEnv(getDb(), 'env-occ', (c) => loadWorkflow(c, id)))!;
    const d = new Draft(logic, stored.instance, 'verb.cancel');
    d.instance.state = 'cancelled';
    const t = d.done();
    expect(await commitTransition(getDb(), stored, t, { keepLease: null })).toBe(true);
    expect(await commitTransition(getDb(), stored, t, { keepLease: null })).toBe(false);
    expect((await inEnv(getDb(), 'env-occ', (c) => loadWorkflow(c, id)))!.instance.state).toBe('cancelled');
  });
});

describe('migrations', () => {
  // Two migrators need two sessions on one database; PGlite is a single session,
  // so the race exists only on Postgres.
  it.skipIf(!process.env['DATABASE_URL'])('two migrators racing on one schema apply each migration exactly once (Postgres only: PGlite has one session)', async () => {
    const schema = `flow_race_${randomUUID().slice(0, 8)}`;
    const a = await openDb(process.env['DATABASE_URL'], { schema });
    const b = await openDb(process.env['DATABASE_URL'], { schema });
    try {
      const [ra, rb] = await Promise.all([migrate(a), migrate(b)]);
      const applied = [...ra, ...rb].sort();
      const files = (await a.pool.query<{ name: string }>('SELECT name FROM schema_migrations ORDER BY name')).rows.map((r) => r.name);
      expect(applied).toEqual(files);
      expect(await migrate(a)).toEqual([]);
    } finally {
      await dropSchema(a);
      await a.close();
      await b.close();
    }
  });
});
