import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { begin, onOutcome } from '../../engine/core/flow.ts';
import type { TraceEvent } from '../../engine/core/journal.ts';
import { CommitBatcher, IN_FLIGHT } from '../../engine/runtime/commit-batcher.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { claimWorkflows } from '../../engine/store/claim-workflows.ts';
import { commitLanded, commitTransition } from '../../engine/store/commit-transition.ts';
import { type Db, openDb } from '../../engine/store/db.ts';
import { insertWorkflow } from '../../engine/store/insert-workflow.ts';
import { publishLogicVersion } from '../../engine/store/logic-versions.ts';
import type { Stored } from '../../engine/store/rows.ts';
import { asScheduler, inEnv } from '../../engine/store/tx.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { closeTestDb, describeEachDriver, openTestDb } from '../support/db.ts';
import { uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';
import { PgProxy } from '../support/pg-proxy.ts';
import { newInstance } from '../../engine/runtime/start-instance.ts';

const ENV = 'env-batch';
const DATABASE_URL = process.env['DATABASE_URL'];
const logic = makeLogic({
  logicId: 'batch.two',
  start: 's0',
  steps: { s0: { kind: 'proxy', path: '/a', next: 's1' }, s1: { kind: 'proxy', path: '/b' } },
});

/** `n` instances of `logic`, claimed: each held by a lease, as a worker holds it. */
async function claimed(db: Db, n: number): Promise<Stored[]> {
  const ids: string[] = [];
  await inEnv(db, ENV, async (c) => {
    await publishLogicVersion(c, ENV, logic).catch(() => false);
    for (let i = 0; i < n; i++) {
      const inst = newInstance(logic, { env: ENV, input: {}, correlationId: null });
      await insertWorkflow(c, await begin(logic, inst), { idempotencyKey: null });
      ids.push(inst.id);
    }
  });
  const all = await claimWorkflows(db.pool, { limit: 100, leaseMs: 30_000 });
  return ids.map((id) => all.find((s) => s.instance.id === id)!);
}

/** Each instance's first step succeeded; its commit keeps the lease and is journalled, as a worker's is. */
async function firstStepDone(stored: Stored) {
  const outcome = { status: 'succeeded', output: { ok: true } } as const;
  const event: TraceEvent = { type: 'outcome', outcome };
  return { stored, t: await onOutcome(logic, stored.instance, outcome, true), event };
}

/**
 * Commits every one of `steps` at once through `batcher`: the first IN_FLIGHT go alone (that many
 * statements may be out at once), the rest together in one batch when one of them returns.
 */
function commitAll(db: Db, batcher: CommitBatcher, steps: Awaited<ReturnType<typeof firstStepDone>>[]) {
  return steps.map(({ stored, t, event }) => {
    const token = stored.leaseToken!;
    return commitTransition(db, stored, t, { keepLease: { token, ttlMs: 30_000 }, by: token, event, send: batcher.commit }).then(
      (committed) => ({ committed }),
      (err: { code?: string }) => ({ error: err.code }),
    );
  });
}

/** From now on, the statements sent on `db`'s connections that carry commits (alone or in a batch). */
function countCommitStatements(db: Db): { alone: number; batches: number } {
  const seen = { alone: 0, batches: 0 };
  const wrapped = new WeakSet<pg.PoolClient>();
  // every checkout, the pool's own query() included, hands out a client: count what it is sent
  db.pool.on('acquire', (client) => {
    if (wrapped.has(client)) return;
    wrapped.add(client);
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    client.query = ((config: string | { text: string }, ...rest: unknown[]) => {
      const text = typeof config === 'string' ? config : config.text;
      if (text.includes('commit_batch(')) seen.batches++;
      else if (text.includes('commit_journaled(')) seen.alone++;
      return query(config, ...rest);
    }) as typeof client.query;
  });
  return seen;
}

const rowVersion = async (db: Db, id: string) => Number((await db.pool.query('SELECT row_version FROM workflows WHERE id = $1', [id])).rows[0].row_version);

describeEachDriver('commits batched across instances', (getDb) => {
  it('a batch in which one row was fenced commits the others and answers that one as lost', async () => {
    const db = getDb();
    const steps = await Promise.all((await claimed(db, 5)).map(firstStepDone));
    const fenced = steps[3]!.stored;
    // someone else (a verb, a reclaim) moved this row while its worker ran the step
    await db.pool.query('UPDATE workflows SET row_version = row_version + 1 WHERE id = $1', [fenced.instance.id]);

    const seen = countCommitStatements(db);
    const results = await Promise.all(commitAll(db, new CommitBatcher(db.pool), steps));
    expect(seen).toEqual({ alone: IN_FLIGHT, batches: 1 });
    expect(results).toEqual([{ committed: true }, { committed: true }, { committed: true }, { committed: false }, { committed: true }]);
    for (const [i, { stored }] of steps.entries()) {
      // the fenced row's version is the one the test moved it to: its commit wrote nothing
      expect(await rowVersion(db, stored.instance.id), `row ${i}`).toBe(stored.rowVersion + 1);
      const runs = await db.pool.query('SELECT state FROM step_runs WHERE workflow_id = $1 ORDER BY seq', [stored.instance.id]);
      expect(
        runs.rows.map((r) => r.state),
        `row ${i}`,
      ).toEqual(i === 3 ? ['running'] : ['succeeded', 'running']);
      const journal = await db.pool.query('SELECT n FROM journal WHERE workflow_id = $1', [stored.instance.id]);
      expect(journal.rowCount, `row ${i}`).toBe(i === 3 ? 0 : 1);
    }
  });

  it('a batch with one row that raises commits the others, and only that row’s caller gets the error', async () => {
    const db = getDb();
    const steps = await Promise.all((await claimed(db, 5)).map(firstStepDone));
    const bad = steps[2]!.stored;
    // the journal row this commit would write exists already: its insert violates the primary key
    await db.pool.query(
      `INSERT INTO journal (env_id, workflow_id, n, from_state, event, decision, born)
       VALUES ($1, $2, $3, 'processing', '{}', '{}', (SELECT created_at FROM workflows WHERE id = $2))`,
      [ENV, bad.instance.id, bad.rowVersion + 1],
    );

    const seen = countCommitStatements(db);
    const results = await Promise.all(commitAll(db, new CommitBatcher(db.pool), steps));
    expect(seen.batches).toBe(1);
    expect(results).toEqual([{ committed: true }, { committed: true }, { error: '23505' }, { committed: true }, { committed: true }]);
    for (const [i, { stored }] of steps.entries()) {
      expect(await rowVersion(db, stored.instance.id), `row ${i}`).toBe(stored.rowVersion + (i === 2 ? 0 : 1));
    }
  });
});

/**
 * A batch is one transaction, so a lost answer leaves every row of it unknown, as a lone commit's
 * would be. The batcher must not commit them again one by one (that retry would find each guard
 * moved and answer "fenced" for a commit that landed): each caller gets the error, and the worker's
 * retry (WorkerPool #commit) asks for its receipt, which is there.
 */
describe.skipIf(!DATABASE_URL)('a lost answer to a batch', () => {
  let db: Db;
  let proxied: Db;
  let proxy: PgProxy;

  beforeAll(async () => {
    db = await openTestDb('postgres');
    proxy = await new PgProxy(new URL(DATABASE_URL!)).listen();
    proxied = await openDb(proxy.url, { schema: db.schema, poolSize: 3 });
  });

  afterAll(async () => {
    await proxied?.close();
    await proxy?.close();
    if (db) await closeTestDb(db);
  });

  it('reaches every caller of the batch as an error, and each finds its own receipt', async () => {
    const steps = await Promise.all((await claimed(db, IN_FLIGHT + 2)).map(firstStepDone));
    proxy.loseAnswerTo('commit_batch');
    const results = await Promise.all(commitAll(proxied, new CommitBatcher(proxied.pool), steps));

    expect(proxy.cuts).toBe(1);
    expect(results.slice(0, IN_FLIGHT)).toEqual(Array(IN_FLIGHT).fill({ committed: true }));
    expect(results.slice(IN_FLIGHT).every((r) => 'error' in r)).toBe(true);
    for (const { stored } of steps) {
      expect(await rowVersion(db, stored.instance.id)).toBe(stored.rowVersion + 1);
      const receipt = { id: stored.instance.id, token: stored.leaseToken!, rowVersion: stored.rowVersion };
      expect(await asScheduler(db, (c) => commitLanded(c, receipt))).toBe(true);
    }
  });
});

/**
 * On Postgres, commits that arrive while one is in flight share the next statement. (On PGlite a
 * statement runs on the event loop's thread, so nothing arrives meanwhile: every commit goes alone.)
 */
describe.skipIf(!DATABASE_URL)('many instances at once [postgres]', () => {
  let db: Db;
  beforeAll(async () => {
    db = await openTestDb('postgres');
  });
  afterAll(async () => {
    if (db) await closeTestDb(db);
  });

  it('many instances driven at once send fewer commit statements than they take steps', async () => {
    const svc = await new FakeService().on('/step', () => ({ status: 200, body: { ok: true } })).listen();
    try {
      const engine = new Engine({
        db,
        env: ENV,
        executors: { handlers: new Map([['TEST', { url: svc.url }]]) },
        worker: { concurrency: 16 },
      });
      const steps = ['a', 'b', 'c', 'd', 'e'];
      const chain = uniqueLogic({
        start: 'a',
        steps: Object.fromEntries(steps.map((s, i) => [s, { kind: 'proxy', handler: 'test', path: '/step', ...(steps[i + 1] ? { next: steps[i + 1] } : {}) }])),
      });
      await engine.publish(chain, ENV);
      const ids: string[] = [];
      for (let i = 0; i < 32; i++) ids.push((await engine.start({ logicId: chain.logicId, input: {}, env: ENV })).id);

      const seen = countCommitStatements(db);
      await engine.workers.drain();
      const states = await db.pool.query('SELECT DISTINCT state FROM workflows WHERE id = ANY($1)', [ids]);
      expect(states.rows).toEqual([{ state: 'completed' }]);
      expect(svc.calls('/step')).toHaveLength(32 * steps.length);
      // every step's commit is one row of a statement; many rows shared one
      expect(seen.alone + seen.batches).toBeGreaterThan(0);
      expect(seen.alone + seen.batches).toBeLessThan(32 * steps.length);
    } finally {
      await svc.close();
    }
  });
});
