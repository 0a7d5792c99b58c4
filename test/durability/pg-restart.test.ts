import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import { type Db, openDb } from '../../engine/store/db.ts';
import { migrate } from '../../engine/store/migrate.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { uniqueLogic } from '../support/engine.ts';
import type { DeliveryInfo } from '../support/idempotency-ledger.ts';
import { LedgerService } from '../support/ledger-service.ts';
import { PgCluster } from '../support/pg-cluster.ts';
import { attemptViolations, committedSuccess, retrying, stateCounts, succeededKeys, waitFor } from '../support/store-checks.ts';
import { killAll, WorkerProcess } from '../support/worker-process.ts';

/**
 * The database crashes (`pg_ctl restart -m immediate`) in the middle of a run. Worker processes
 * ride it out without exiting, nothing the database acknowledged is lost, every workflow finishes.
 * The server is a private one (see PgCluster): the shared CI server serves other files meanwhile.
 */
const ENV = 'restart';
const WORKERS = 3;
const FIRST_WAVE = 60;
const TOTAL = 150;
const STEPS = ['/a', '/b', '/c'];

describe.skipIf(!process.env['DATABASE_URL'] || !PgCluster.available())('Postgres crash-restart under load', () => {
  let cluster: PgCluster;
  let db: Db;
  let svc: LedgerService;
  let engine: Engine;
  const workers: WorkerProcess[] = [];

  beforeAll(async () => {
    cluster = await PgCluster.create();
    db = await openDb(cluster.url, { schema: `flow_test_${randomBytes(6).toString('hex')}`, poolSize: 8 });
    await migrate(db);
    const ok = (body: unknown) => ({ status: 200, body: { n: (body as { n: number }).n } });
    svc = await new LedgerService({
      operations: Object.fromEntries(STEPS.map((p) => [p, ok])),
      latencyMs: () => 20 + Math.floor(Math.random() * 60),
      committed: (info: DeliveryInfo) => retrying(() => committedSuccess(db, info.key, info.kind)),
    }).listen();
    engine = new Engine({ db, env: ENV });
  });

  afterAll(async () => {
    await killAll(workers);
    await svc?.close();
    await db?.close();
    await cluster?.destroy();
  });

  it('workers reconnect without exiting, nothing acknowledged is lost, every workflow finishes', async () => {
    const logic = uniqueLogic({
      start: 'a',
      steps: {
        a: { kind: 'proxy', handler: 'test', path: '/a', next: 'b' },
        b: { kind: 'proxy', handler: 'test', path: '/b', next: 'c' },
        c: { kind: 'proxy', handler: 'test', path: '/c' },
      },
    });
    await engine.publish(logic, ENV);
    for (let i = 0; i < WORKERS; i++) {
      workers.push(
        await WorkerProcess.start({ databaseUrl: cluster.url, schema: db.schema, env: ENV, handlerUrl: svc.mount(`/w${i}`), concurrency: 4, leaseMs: 2000 }),
      );
    }
    const pids = workers.map((w) => w.pid);

    // A start is acknowledged when engine.start returns; a start cut off by the crash is sent again
    // with its idempotency key, so it yields exactly one instance whether or not it had committed.
    const acknowledged = new Map<number, string>();
    let startFailures = 0;
    const startOne = (n: number) =>
      retrying(async () => {
        try {
          const { id } = await engine.start({ logicId: logic.logicId, input: { n }, env: ENV, idempotencyKey: `start-${n}` });
          acknowledged.set(n, id);
        } catch (err) {
          startFailures++;
          throw err;
        }
      });
    for (let n = 0; n < FIRST_WAVE; n++) await startOne(n);
    const rest = (async () => {
      for (let n = FIRST_WAVE; n < TOTAL; n++) {
        await startOne(n);
        await sleep(40);
      }
    })();

    await waitFor('a third of the first wave to complete', async () => ((await stateCounts(db))['completed'] ?? 0) >= FIRST_WAVE / 3 || undefined);
    // what the database has acknowledged just before the crash
    const finishedBefore = (
      await db.pool.query<{ k: string }>(`SELECT workflow_id || '#' || seq || ':' || state AS k FROM step_runs WHERE state <> 'running'`)
    ).rows.map((r) => r.k);
    const terminalBefore = (await db.pool.query<{ k: string }>(`SELECT id || ':' || state AS k FROM workflows WHERE state = 'completed'`)).rows.map(
      (r) => r.k,
    );
    const deliveriesBefore = svc.ledger.deliveries.length;
    // a transaction of this process in flight at the crash, on the same pool code the workers use:
    // it must reject, not take the process down
    const cutOff = asScheduler(db, (c) => c.query('SELECT pg_sleep(30)')).then(
      () => 'committed',
      (err: Error) => `rejected: ${err.message}`,
    );
    await waitFor('the transaction to be running', async () => {
      const res = await db.pool.query(`SELECT 1 FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)'`);
      return res.rowCount ? true : undefined;
    });
    // a LISTEN of this process, on the same code the workers use for their wake-ups
    let heard = 0;
    const unlisten = await db.listen('probe_restart', () => heard++);
    const t0 = Date.now();
    await cluster.restartImmediate();
    const restartMs = Date.now() - t0;
    expect(await cutOff).toMatch(/^rejected/);

    await rest;
    await waitFor(
      'every workflow to complete',
      async () => {
        const counts = await retrying(() => stateCounts(db));
        return counts['completed'] === TOTAL ? counts : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 200 },
    );

    const errorLines = workers.flatMap((w) => w.output.filter((l) => l.startsWith('error')));
    console.log(
      `pg restart: server down and up in ${restartMs} ms with ${finishedBefore.length} attempts committed; ` +
        `${TOTAL} workflows completed; ${startFailures} start calls cut off and resent; ${svc.ledger.deliveries.length - deliveriesBefore} deliveries after the crash ` +
        `(${svc.ledger.count('replayed')} replayed in all); worker pids ${pids.join(',')} alive: ${workers.map((w) => w.alive).join(',')}; ` +
        `${errorLines.length} error lines logged by workers${errorLines[0] ? `, e.g. "${errorLines[0]}"` : ''}`,
    );

    // the workers rode it out: the very same processes, still running
    expect(workers.map((w) => [w.pid, w.alive])).toEqual(pids.map((p) => [p, true]));
    // one instance per logical start, every acknowledged one among them
    const ids = (await db.pool.query<{ id: string; key: string }>('SELECT id, idempotency_key AS key FROM workflows')).rows;
    expect(ids.length).toBe(TOTAL);
    expect(new Set(ids.map((r) => r.id))).toEqual(new Set(acknowledged.values()));
    // every attempt finished before the crash is still there, unchanged; completed stays completed
    const finishedAfter = new Set((await db.pool.query<{ k: string }>(`SELECT workflow_id || '#' || seq || ':' || state AS k FROM step_runs`)).rows.map((r) => r.k));
    expect(finishedBefore.filter((k) => !finishedAfter.has(k))).toEqual([]);
    const completedAfter = new Set((await db.pool.query<{ k: string }>(`SELECT id || ':' || state AS k FROM workflows`)).rows.map((r) => r.k));
    expect(terminalBefore.filter((k) => !completedAfter.has(k))).toEqual([]);
    // a worker calls step b only after step a's commit was acknowledged: were that commit lost, a
    // would be called again after b. No workflow shows a step called after a later one.
    const order = new Map<string, number>();
    const regressions: string[] = [];
    for (const d of svc.ledger.deliveries) {
      const at = STEPS.indexOf(d.op);
      if (at < (order.get(d.workflowId) ?? -1)) regressions.push(`${d.workflowId}: ${d.op} after ${STEPS[order.get(d.workflowId)!]}`);
      order.set(d.workflowId, Math.max(at, order.get(d.workflowId) ?? -1));
    }
    expect(regressions).toEqual([]);
    expect(await succeededKeys(db)).toEqual([...svc.ledger.appliedKeys()].sort());
    expect([...svc.ledger.applications.values()].filter((n) => n !== 1)).toEqual([]);
    expect(svc.ledger.deliveries.filter((d) => d.afterCommit)).toEqual([]);
    expect(await attemptViolations(db)).toEqual([]);

    // the LISTEN connection came back by itself (and said so once); a NOTIFY sent now is heard
    expect(heard).toBeGreaterThan(0);
    const mark = heard;
    await waitFor(
      'a NOTIFY after the restart to be heard',
      async () => {
        await db.pool.query('NOTIFY probe_restart');
        return heard > mark || undefined;
      },
      { timeoutMs: 10_000, intervalMs: 200 },
    );
    await unlisten();
  }, 150_000);
});
