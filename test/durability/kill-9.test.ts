import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RetryPolicy } from '../../contracts/index.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import type { Db } from '../../engine/store/db.ts';
import { closeTestDb, openTestDb } from '../support/db.ts';
import { uniqueLogic } from '../support/engine.ts';
import type { Reply } from '../support/fake-service.ts';
import type { DeliveryInfo } from '../support/idempotency-ledger.ts';
import { type InterceptMode, LedgerService } from '../support/ledger-service.ts';
import { attemptViolations, committedSuccess, succeededKeys, waitFor, waitUntilAtRest } from '../support/store-checks.ts';
import { killAll, WorkerProcess } from '../support/worker-process.ts';

/**
 * Crash-proof durability: worker processes are SIGKILLed at chosen moments around a call while
 * 240 workflows run, and restarted. Every workflow still ends where its input says, every effect
 * the owning service applied is committed exactly once, and nothing committed runs again.
 */
const DATABASE_URL = process.env['DATABASE_URL'];
const ENV = 'chaos';
const SLOTS = 4;
/** `npm run soak` raises this (FLOW_SOAK_WORKFLOWS); CI runs the short version. */
const WORKFLOWS = Number(process.env['FLOW_SOAK_WORKFLOWS'] ?? 240);
const LEASE_MS = 1500;
const RETRY: RetryPolicy = { maxAttempts: 6, initialMs: 20, maxMs: 100 };

type Mode = 'ok' | 'decline' | 'flaky' | 'flaky-decline';
/** 40% succeed, 25% are declined at charge and compensate, 20% hit 503s first, 15% both. */
const MODES: Mode[] = [...Array(8).fill('ok'), ...Array(5).fill('decline'), ...Array(4).fill('flaky'), ...Array(3).fill('flaky-decline')];
const EXPECTED: Record<Mode, string> = { ok: 'completed', flaky: 'completed', decline: 'compensated', 'flaky-decline': 'compensated' };

type KillKind = 'before-call' | 'after-call-before-commit' | 'after-commit' | 'idle';

describe.skipIf(!DATABASE_URL)('kill -9 of worker processes', () => {
  let db: Db;
  let svc: LedgerService;
  let engine: Engine;
  const workers = new Map<number, WorkerProcess>();
  const everyWorker: WorkerProcess[] = [];
  const incarnations = new Map<number, number>();

  /** The first two deliveries of each key answer 503 in the flaky modes. */
  const transientsLeft = new Map<string, number>();
  function flaky(body: unknown, info: DeliveryInfo): Reply | null {
    const mode = (body as { mode: Mode }).mode;
    if (mode !== 'flaky' && mode !== 'flaky-decline') return null;
    const left = transientsLeft.get(info.key) ?? 2;
    transientsLeft.set(info.key, left - 1);
    return left > 0 ? { status: 503, body: { message: 'try again' } } : null;
  }
  const ok = (what: string) => (body: unknown, info: DeliveryInfo) => flaky(body, info) ?? { status: 200, body: { [what]: (body as { n: number }).n } };

  beforeAll(async () => {
    db = await openTestDb('postgres', { poolSize: 8 });
    svc = await new LedgerService({
      operations: {
        '/reserve': ok('reserved'),
        '/hold': ok('held'),
        '/charge': (body, info) =>
          flaky(body, info) ?? ((body as { mode: Mode }).mode.endsWith('decline') ? { status: 422, body: { message: 'card declined' } } : { status: 200, body: { charged: true } }),
        '/notify': ok('notified'),
        '/release': ok('released'),
        '/unhold': ok('unheld'),
      },
      latencyMs: () => 10 + Math.floor(Math.random() * 60),
      committed: (info) => committedSuccess(db, info.key, info.kind),
    }).listen();
    engine = new Engine({ db, env: ENV });
  });

  afterAll(async () => {
    await killAll(everyWorker);
    await svc?.close();
    if (db) await closeTestDb(db);
  });

  async function spawnSlot(slot: number): Promise<WorkerProcess> {
    const inc = (incarnations.get(slot) ?? -1) + 1;
    incarnations.set(slot, inc);
    const w = await WorkerProcess.start({
      databaseUrl: DATABASE_URL!,
      schema: db.schema,
      env: ENV,
      handlerUrl: svc.mount(prefixOf(slot, inc)),
      concurrency: 4,
      leaseMs: LEASE_MS,
      pollMs: 50,
    });
    everyWorker.push(w);
    workers.set(slot, w);
    return w;
  }
  const prefixOf = (slot: number, inc: number) => `/w${slot}.${inc}`;

  /** Has the attempt this delivery belongs to been finished (committed) in the store? */
  async function attemptCommitted(d: DeliveryInfo): Promise<boolean> {
    const res = await db.pool.query(
      `SELECT 1 FROM step_runs WHERE workflow_id = $1 AND idempotency_key = $2 AND attempt = $3 AND kind = $4 AND state <> 'running'`,
      [d.workflowId, d.key, d.attempt, d.kind],
    );
    return (res.rowCount ?? 0) > 0;
  }

  /**
   * Kills the worker in `slot` at the moment `kind` names, using the service to catch it there:
   * - before-call: its next call is caught before it takes effect (and dropped);
   * - after-call-before-commit: its next call is applied, the answer held, and the worker killed;
   * - after-commit: its next call is answered, and the worker killed once that attempt is committed.
   * When the worker makes no call in time, it is killed wherever it is (`idle`).
   */
  async function killAt(slot: number, kind: Exclude<KillKind, 'idle'>): Promise<KillKind> {
    const w = workers.get(slot)!;
    const prefix = prefixOf(slot, incarnations.get(slot)!);
    const mode: InterceptMode = kind === 'before-call' ? 'before-effect' : kind === 'after-commit' ? 'after-reply' : 'after-effect';
    const catchIt = svc.intercept((i) => i.via === prefix, mode);
    const caught = await Promise.race([catchIt.arrived, sleep(3000).then(() => null)]);
    if (caught === null && catchIt.disarm()) {
      await w.kill();
      return 'idle';
    }
    let happened: KillKind = kind;
    if (kind === 'after-commit') {
      const d = await catchIt.arrived;
      const seen = await waitFor('the attempt to commit', async () => ((await attemptCommitted(d)) ? true : undefined), {
        timeoutMs: 3000,
        intervalMs: 5,
      }).catch(() => false);
      if (!seen) happened = 'after-call-before-commit';
    }
    await w.kill();
    catchIt.release();
    return happened;
  }

  it('every workflow ends in its expected state; every applied effect is committed once and never re-run', async () => {
    const started = Date.now();
    const logic = uniqueLogic({
      start: 'reserve',
      steps: {
        reserve: { kind: 'proxy', handler: 'test', path: '/reserve', retry: RETRY, compensate: { kind: 'proxy', handler: 'test', path: '/release', retry: RETRY }, next: 'hold' },
        hold: { kind: 'proxy', handler: 'test', path: '/hold', retry: RETRY, compensate: { kind: 'proxy', handler: 'test', path: '/unhold', retry: RETRY }, next: 'charge' },
        charge: { kind: 'proxy', handler: 'test', path: '/charge', retry: RETRY, next: 'notify' },
        notify: { kind: 'proxy', handler: 'test', path: '/notify', retry: RETRY },
      },
    });
    await engine.publish(logic, ENV);
    for (let slot = 0; slot < SLOTS; slot++) await spawnSlot(slot);

    const expected = new Map<string, Mode>();
    const feeding = (async () => {
      // a steady stream over ~20 s, so kills land all through the run
      for (let n = 0; n < WORKFLOWS; n++) {
        const mode = MODES[n % MODES.length]!;
        const { id } = await engine.start({ logicId: logic.logicId, input: { n, mode }, env: ENV });
        expected.set(id, mode);
        if (n % 12 === 11) await sleep(1000);
      }
    })();

    const kills: KillKind[] = [];
    let feedingDone = false;
    void feeding.then(
      () => (feedingDone = true),
      () => (feedingDone = true),
    );
    const order: Exclude<KillKind, 'idle'>[] = ['after-call-before-commit', 'before-call', 'after-commit'];
    const restarts: Promise<WorkerProcess>[] = [];
    while (!feedingDone) {
      await sleep(100 + Math.floor(Math.random() * 400));
      // a slot whose worker runs; the others may still be restarting (two can be down at once)
      const up = [...workers].filter(([, w]) => w.alive).map(([slot]) => slot);
      if (up.length < 2) continue;
      const slot = up[Math.floor(Math.random() * up.length)]!;
      kills.push(await killAt(slot, order[kills.length % order.length]!));
      restarts.push(sleep(Math.floor(Math.random() * 500)).then(() => spawnSlot(slot)));
    }
    await Promise.all(restarts);
    await feeding;

    const counts = await waitUntilAtRest(db, { timeoutMs: 60_000 * Math.max(1, WORKFLOWS / 240) });
    const states = await db.pool.query<{ id: string; state: string }>('SELECT id, state FROM workflows');
    const wrong = states.rows.filter((r) => EXPECTED[expected.get(r.id)!] !== r.state).map((r) => `${r.id} (${expected.get(r.id)}) ended ${r.state}`);

    const byKind = Object.fromEntries(['before-call', 'after-call-before-commit', 'after-commit', 'idle'].map((k) => [k, kills.filter((x) => x === k).length]));
    const { ledger } = svc;
    console.log(
      `kill -9: ${kills.length} kills ${JSON.stringify(byKind)}; ${WORKFLOWS} workflows ${JSON.stringify(counts)}; ` +
        `${ledger.deliveries.length} deliveries (${ledger.count('applied')} applied, ${ledger.count('replayed')} replayed, ` +
        `${ledger.count('transient')} transient, ${ledger.count('refused')} refused, ${ledger.count('dropped')} dropped); ` +
        `${everyWorker.length} worker processes; ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );

    expect(states.rows.length).toBe(WORKFLOWS);
    expect(wrong).toEqual([]);
    // each kind of kill happened at least once (the kinds rotate)
    expect([byKind['before-call'], byKind['after-call-before-commit'], byKind['after-commit']].every((k) => k! >= 1)).toBe(true);
    // every effect the service applied is committed as succeeded, and every committed success was applied
    expect(await succeededKeys(db)).toEqual([...ledger.appliedKeys()].sort());
    // the service applied each key's effect exactly once, however often it was delivered
    expect([...ledger.applications.values()].filter((n) => n !== 1)).toEqual([]);
    // a call caught after its effect and killed is delivered again after the lease, and replayed
    expect(ledger.count('replayed')).toBeGreaterThanOrEqual(byKind['after-call-before-commit']!);
    // no call for a key arrived once its success was committed: committed steps never run again
    expect(ledger.deliveries.filter((d) => d.afterCommit)).toEqual([]);
    expect(await attemptViolations(db)).toEqual([]);
    // compensated workflows undid hold, then reserve, and never charged
    const undo = await db.pool.query<{ id: string; steps: string[] }>(
      `SELECT workflow_id AS id, array_agg(step ORDER BY seq) AS steps FROM step_runs
       WHERE kind = 'compensation' AND state = 'succeeded' GROUP BY workflow_id`,
    );
    const compensated = [...expected].filter(([, m]) => EXPECTED[m] === 'compensated').map(([id]) => id);
    expect(undo.rows.length).toBe(compensated.length);
    expect(undo.rows.filter((r) => r.steps.join() !== 'hold,reserve')).toEqual([]);
    for (const w of workers.values()) expect(w.alive).toBe(true);
  }, 150_000 * Math.max(1, WORKFLOWS / 240));
});
