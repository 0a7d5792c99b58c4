import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import type { Db } from '../../engine/store/db.ts';
import { closeTestDb, openTestDb } from '../support/db.ts';
import { uniqueLogic } from '../support/engine.ts';
import { LedgerService } from '../support/ledger-service.ts';
import { waitFor } from '../support/store-checks.ts';
import { killAll, WorkerProcess } from '../support/worker-process.ts';
import { lastTracedWrite, traceWorkflowWrites, tracedWrites } from '../support/write-trace.ts';

/**
 * Fencing: a worker process frozen (SIGSTOP) mid-call past its lease loses the instance to another
 * worker, which completes it. Thawed (SIGCONT), the first worker gets its answer and, having missed
 * the notice that its lease was taken, commits — and that commit changes nothing: the outcome
 * stays recorded once.
 */
const DATABASE_URL = process.env['DATABASE_URL'];
const ENV = 'fencing';
const LEASE_MS = 1500;

describe.skipIf(!DATABASE_URL)('a paused worker is fenced out', () => {
  let db: Db;
  let svc: LedgerService;
  let engine: Engine;
  const workers: WorkerProcess[] = [];

  beforeAll(async () => {
    db = await openTestDb('postgres', { poolSize: 4 });
    await traceWorkflowWrites(db);
    const ok = (what: string) => () => ({ status: 200, body: { [what]: true } });
    svc = await new LedgerService({ operations: { '/slow': ok('slow'), '/after': ok('after'), '/probe': ok('probe') } }).listen();
    engine = new Engine({ db, env: ENV });
  });

  afterAll(async () => {
    await killAll(workers);
    await svc?.close();
    if (db) await closeTestDb(db);
  });

  const worker = async (name: string) => {
    const w = await WorkerProcess.start({
      databaseUrl: DATABASE_URL!,
      schema: db.schema,
      env: ENV,
      handlerUrl: svc.mount(`/${name}`),
      concurrency: 1,
      leaseMs: LEASE_MS,
      pollMs: 50,
      extraEnv: { PGAPPNAME: `fencing-${name}` },
    });
    workers.push(w);
    return w;
  };

  const snapshot = async (id: string) => ({
    row: (await db.pool.query('SELECT state, row_version, ctx, output, lease_token FROM workflows WHERE id = $1', [id])).rows[0],
    runs: (await db.pool.query('SELECT seq, step, kind, attempt, state, output, finished_at FROM step_runs WHERE workflow_id = $1 ORDER BY seq', [id])).rows,
  });

  it('the thawed worker’s commit affects 0 rows and the outcome is recorded once', async () => {
    const logic = uniqueLogic({
      start: 'slow',
      steps: {
        slow: { kind: 'proxy', handler: 'test', path: '/slow', next: 'after' },
        after: { kind: 'proxy', handler: 'test', path: '/after' },
      },
    });
    const probe = uniqueLogic({ start: 'probe', steps: { probe: { kind: 'proxy', handler: 'test', path: '/probe' } } });
    await engine.publish(logic, ENV);
    await engine.publish(probe, ENV);

    // p1 calls /slow; the service applies it and holds the answer while p1 is frozen
    const held = svc.intercept((i) => i.via === '/p1' && i.op === '/slow', 'after-effect');
    const p1 = await worker('p1');
    const { id } = await engine.start({ logicId: logic.logicId, input: {}, env: ENV });
    const call = await Promise.race([held.arrived, sleep(20_000).then(() => Promise.reject(new Error('p1 never called /slow')))]);
    p1.signal('SIGSTOP');
    const leasedBy = (await snapshot(id)).row.lease_token as string;
    // p1 must miss the notice p2's claim sends it (migration 0018), or it would stop before its
    // commit: its listening connection is cut while it is frozen, so the commit's fence is what
    // stops it (it reconnects a second after it thaws, well after that commit)
    const cut = await db.pool.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'fencing-p1' AND query LIKE 'LISTEN %'`,
    );
    expect(cut.rowCount).toBe(1);

    // p2 reclaims once p1's lease has run out (p1 sends no heartbeat while stopped) and completes it
    const p2 = await worker('p2');
    await waitFor('p2 to complete the instance', async () => ((await snapshot(id)).row.state === 'completed' ? true : undefined), { timeoutMs: 20_000 });
    const done = await snapshot(id);
    expect(done.row.lease_token).not.toBe(leasedBy);
    await p2.stop();

    // thaw p1 with its answer; with concurrency 1 it claims the probe only after its commit returned
    const mark = await lastTracedWrite(db);
    held.release();
    p1.signal('SIGCONT');
    const { id: probeId } = await engine.start({ logicId: probe.logicId, input: {}, env: ENV });
    await waitFor('p1 to run the probe', async () => ((await snapshot(probeId)).row.state === 'completed' ? true : undefined), { timeoutMs: 20_000 });

    const p1Commits = (await tracedWrites(db, { after: mark, app: 'fencing-p1' })).filter((w) => w.statement === 'commit');
    console.log(`fencing: p1 (pid ${p1.pid}) commits after SIGCONT: ${JSON.stringify(p1Commits.map((w) => ({ rows: w.rows, ids: w.ids })))}`);
    // its first commit is the stale one for the fenced instance: it matched no row
    expect(p1Commits[0]?.rows).toBe(0);
    expect(p1Commits.slice(1).every((w) => w.rows === 1 && w.ids[0] === probeId)).toBe(true);
    // nothing about the instance changed after p2 completed it
    expect(await snapshot(id)).toEqual(done);

    const record = await engine.get(id, ENV);
    expect(record.state).toBe('completed');
    expect(record.steps.map((s) => [s.step, s.attempt, s.state])).toEqual([
      ['slow', 1, 'succeeded'],
      ['after', 1, 'succeeded'],
    ]);
    // the call ran twice (at least once), its effect once
    const slowCalls = svc.ledger.deliveries.filter((d) => d.key === call.key);
    expect(slowCalls.map((d) => [d.via, d.outcome])).toEqual([
      ['/p1', 'applied'],
      ['/p2', 'replayed'],
    ]);
    expect(svc.ledger.applications.get(call.key)).toBe(1);
    expect(p1.alive).toBe(true);
  }, 90_000);
});
