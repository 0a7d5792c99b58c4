import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import { type Db, openDb } from '../../engine/store/db.ts';
import { closeTestDb, openTestDb } from '../support/db.ts';
import { uniqueLogic } from '../support/engine.ts';
import { func, LedgerExecutor, outcomes, TEST_MODULE_BYTES, TEST_MODULES } from '../support/ledger-executor.ts';
import { attemptViolations, committedSuccess, stateCounts, waitFor } from '../support/store-checks.ts';

/**
 * Claiming (engine core): two worker pools — two engines, each with its own connection pool — on
 * one Postgres schema claim side by side with SKIP LOCKED and never run the same attempt twice.
 */
const DATABASE_URL = process.env['DATABASE_URL'];
const ENV = 'claims';
const WORKFLOWS = 300;

describe.skipIf(!DATABASE_URL)('two worker pools on one schema', () => {
  let db1: Db;
  let db2: Db;
  let lx: LedgerExecutor;
  const engines: Engine[] = [];
  const errors: unknown[] = [];

  beforeAll(async () => {
    db1 = await openTestDb('postgres');
    db2 = await openDb(DATABASE_URL, { schema: db1.schema });
    const transientOnce = new Set<string>();
    lx = new LedgerExecutor({
      operations: {
        one: () => outcomes.ok({ one: true }),
        // every third workflow's second step fails once, transiently: its retry is a second attempt
        two: (input, info) => {
          if ((input as { i: number }).i % 3 === 0 && !transientOnce.has(info.key)) {
            transientOnce.add(info.key);
            return outcomes.unavailable();
          }
          return outcomes.ok({ two: true });
        },
        three: () => outcomes.ok({ three: true }),
      },
      latencyMs: () => Math.floor(Math.random() * 4),
      committed: (info) => committedSuccess(db1, info.key, info.kind),
    });
    for (const [db, via] of [
      [db1, 'engine-1'],
      [db2, 'engine-2'],
    ] as const) {
      engines.push(
        new Engine({
          db,
          env: ENV,
          executors: { func: lx.executor(via) },
          worker: { concurrency: 8, pollMs: 10 },
          observer: { onError: (_id, err) => errors.push(err) },
        }),
      );
    }
  });

  afterAll(async () => {
    for (const e of engines) await e.close();
    await db2?.close();
    if (db1) await closeTestDb(db1);
  });

  it('never execute the same step attempt twice: one executor call per (idempotency key, attempt)', async () => {
    const logic = uniqueLogic({
      modules: TEST_MODULES,
      input: { type: 'object' },
      start: 's1',
      steps: {
        s1: { ...func('one'), next: 's2' },
        s2: { ...func('two'), retry: { maxAttempts: 3, initialMs: 0 }, next: 's3' },
        s3: func('three'),
      },
    });
    const [e1, e2] = engines as [Engine, Engine];
    await e1.publishVersion(ENV, logic, TEST_MODULE_BYTES);
    // both pools are running before the first instance exists, so every claim is contested
    await e1.workers.start();
    await e2.workers.start();
    for (let i = 0; i < WORKFLOWS; i++) await (i % 2 ? e1 : e2).start({ logicId: logic.logicId, input: { i }, env: ENV });
    const counts = await waitFor(
      'every workflow to complete',
      async () => {
        const c = await stateCounts(db1);
        return c['completed'] === WORKFLOWS ? c : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 100 },
    );

    const perAttempt = lx.ledger.perAttempt();
    const calls = (via: string) => lx.ledger.deliveries.filter((d) => d.via === via).length;
    const attemptRows = await db1.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM step_runs WHERE idempotency_key IS NOT NULL');
    console.log(
      `claim race: ${WORKFLOWS} workflows ${JSON.stringify(counts)}; ${lx.ledger.deliveries.length} executor calls for ${perAttempt.size} attempts ` +
        `(engine-1 ${calls('engine-1')}, engine-2 ${calls('engine-2')})`,
    );

    expect([...perAttempt].filter(([, n]) => n !== 1)).toEqual([]);
    // 3 steps each, plus one retry attempt for every third workflow
    expect(perAttempt.size).toBe(WORKFLOWS * 3 + WORKFLOWS / 3);
    expect(attemptRows.rows[0]!.n).toBe(perAttempt.size);
    // both pools did real work
    expect(calls('engine-1')).toBeGreaterThan(0);
    expect(calls('engine-2')).toBeGreaterThan(0);
    expect(lx.ledger.count('replayed')).toBe(0);
    expect(lx.ledger.deliveries.filter((d) => d.afterCommit)).toEqual([]);
    expect(await attemptViolations(db1)).toEqual([]);
    expect(errors).toEqual([]);
  }, 90_000);
});
