import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { FlowError, isAllowedTransition, type TransitionCause, type WorkflowState } from '../../contracts/index.ts';
import type { Instance } from '../../engine/core/instance.ts';
import type { Transition } from '../../engine/core/transition.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { describeEachDriver } from '../support/db.ts';
import { OPERATOR, uniqueLogic } from '../support/engine.ts';
import { func, LedgerExecutor, outcomes, TEST_MODULE_BYTES, TEST_MODULES } from '../support/ledger-executor.ts';
import { attemptViolations, committedSuccess, succeededKeys, waitFor, waitUntilAtRest } from '../support/store-checks.ts';

/**
 * A verb and a worker advancing the same instance at the same moment: exactly one wins, the other
 * is fenced (0 rows) or refused (409), and nothing is clobbered. In process, on both drivers.
 */
const ENV = 'verbs';
const O = { ...OPERATOR, env: ENV };

interface Seen {
  from: Instance;
  t: Transition;
  committed: boolean;
}

describeEachDriver('verb and worker races', (getDb, driver) => {
  let engine: Engine;
  let lx: LedgerExecutor;
  const seen: Seen[] = [];
  const errors: unknown[] = [];
  /** Instances whose lease the pool heard was taken (migration 0018's notice, or a heartbeat). */
  const lost: string[] = [];
  /** Behaviour knobs for the stress run (the deterministic tests leave them at 0). */
  const chance = { b503: 0, b422: 0, undo503: 0 };

  beforeAll(async () => {
    const db = getDb();
    const ok = (tag: string) => () => outcomes.ok({ [tag]: true });
    const maybe = (p503: number, p422: number, tag: string) => () =>
      Math.random() < p503 ? outcomes.unavailable() : Math.random() < p422 ? outcomes.refused() : outcomes.ok({ [tag]: true });
    lx = new LedgerExecutor({
      operations: {
        reserve: ok('reserved'),
        release: ok('released'),
        work: ok('worked'),
        unwork: ok('unworked'),
        done: ok('done'),
        a: ok('a'),
        b: () => maybe(chance.b503, chance.b422, 'b')(),
        c: ok('c'),
        'undo-a': () => maybe(chance.undo503, 0, 'undo-a')(),
        'undo-b': () => maybe(chance.undo503, 0, 'undo-b')(),
      },
      latencyMs: () => Math.floor(Math.random() * 5),
      committed: (info) => committedSuccess(db, info.key, info.kind),
    });
    engine = new Engine({
      db,
      env: ENV,
      executors: { func: lx.executor() },
      worker: { concurrency: 8, pollMs: 10 },
      observer: {
        onTransition: (from, t, committed) => seen.push({ from, t, committed }),
        onError: (_id, err) => errors.push(err),
        onLeaseLost: (id) => lost.push(id),
      },
    });
    await engine.workers.start();
  });

  afterAll(async () => {
    lx?.gates.releaseAll();
    await engine?.close();
  });

  const fencedFor = (id: string) => seen.filter((s) => s.from.id === id && !s.committed);

  const reserveWork = () =>
    uniqueLogic({
      modules: TEST_MODULES,
      input: { type: 'object' },
      start: 'reserve',
      steps: {
        reserve: { ...func('reserve'), compensate: func('release'), next: 'work' },
        work: { ...func('work'), compensate: func('unwork'), next: 'done' },
        done: func('done'),
      },
    });

  async function startHeld(logic = reserveWork(), op = 'work') {
    await engine.publishVersion(ENV, logic, TEST_MODULE_BYTES);
    const tag = `${logic.logicId}:${Math.random()}`;
    const held = lx.gates.hold((c) => c.op === op && (c.input as { tag?: string } | null)?.tag === tag);
    const { id } = await engine.start({ logicId: logic.logicId, input: { tag }, env: ENV });
    const call = await Promise.race([held.arrived, sleep(20_000).then(() => Promise.reject(new Error(`${op} was never called`)))]);
    return { id, held, call };
  }

  /** The verb's commit took the lease: the pool hears of it at once, drops the call's answer and commits nothing. */
  async function releaseAfterNotice(id: string, held: { release(): void }) {
    await waitFor('the pool to hear the lease was taken', async () => (lost.includes(id) ? true : undefined));
    held.release();
    await waitFor('the worker to let the instance go', async () => (engine.workers.inflight === 0 ? true : undefined));
    expect(fencedFor(id)).toEqual([]);
  }

  // The commit's own fence, for a worker that did not hear (a lost notice): the race below, and
  // test/durability/fencing.test.ts across processes.
  it('cancel while a worker sits between execute and commit: the verb wins, the worker stops', async () => {
    const { id, held, call } = await startHeld();
    const cancelled = await engine.ops.cancel(id, { reason: 'operator first' }, O);
    expect(cancelled.state).toBe('cancelled');
    await releaseAfterNotice(id, held);

    const record = await engine.get(id, ENV);
    expect(record.state).toBe('cancelled');
    expect(record.error).toEqual({ code: 'CANCELLED', message: 'operator first' });
    expect(record.steps.map((s) => [s.step, s.attempt, s.state])).toEqual([
      ['reserve', 1, 'succeeded'],
      ['work', 1, 'superseded'],
    ]);
    const audit = await engine.ops.audit(id, { env: ENV });
    expect(audit.map((a) => [a.verb, (a.before as { state: string }).state, (a.after as { state: string }).state])).toEqual([
      ['cancel', 'processing', 'cancelled'],
    ]);
    // the worker's answer for `work` was applied by the service, and never moved the instance on
    expect(lx.ledger.applications.get(call.key)).toBe(1);
    expect(lx.ledger.deliveries.filter((d) => d.workflowId === id).map((d) => d.op)).toEqual(['reserve', 'work']);
  });

  it('cancel with compensation while a worker is held: the unwinding runs, the late worker stops', async () => {
    const { id, held } = await startHeld();
    const unwinding = await engine.ops.cancel(id, { reason: 'undo it', compensate: true }, O);
    expect(unwinding.state).toBe('compensating');
    // another slot claims the unwinding at once; the held worker still waits for its answer
    await waitFor('the compensations to run', async () => ((await engine.get(id, ENV)).state === 'cancelled' ? true : undefined));
    await releaseAfterNotice(id, held);

    const record = await engine.get(id, ENV);
    expect(record.state).toBe('cancelled');
    expect(record.compensations.map((c) => [c.step, c.state])).toEqual([
      ['reserve', 'succeeded'],
      ['work', 'succeeded'],
    ]);
    expect(record.steps.filter((s) => s.kind === 'compensation').map((s) => s.step)).toEqual(['work', 'reserve']);
    expect(record.steps.find((s) => s.step === 'work' && s.kind === 'step')?.state).toBe('superseded');
    expect((await engine.ops.audit(id, { env: ENV })).map((a) => a.verb)).toEqual(['cancel']);
  });

  it.skipIf(driver === 'pglite')('a verb and a commit released together: exactly one wins, whichever queued first', async () => {
    const logic = uniqueLogic({
      modules: TEST_MODULES,
      input: { type: 'object' },
      start: 'reserve',
      steps: { reserve: { ...func('reserve'), next: 'done' }, done: func('done') },
    });
    const winners: string[] = [];
    for (const workerFirst of [true, false, true, false]) {
      const { id, held } = await startHeld(logic, 'done');
      // a barrier: this transaction holds the row, so the commit and the verb both queue behind it
      const barrier = await getDb().pool.connect();
      try {
        await barrier.query('BEGIN');
        await barrier.query('SELECT 1 FROM workflows WHERE id = $1 FOR UPDATE', [id]);
        const pid = (await barrier.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
        const queued = (n: number) =>
          waitFor(`${n} statements queued behind the barrier`, async () => {
            // the second in line waits on the first (which holds the tuple lock), not on the barrier
            const res = await getDb().pool.query<{ n: number }>(
              `WITH RECURSIVE blocked(pid) AS (
                 SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))
                 UNION SELECT a.pid FROM pg_stat_activity a JOIN blocked b ON b.pid = ANY(pg_blocking_pids(a.pid)))
               SELECT count(*)::int AS n FROM blocked`,
              [pid],
            );
            return res.rows[0]!.n >= n ? true : undefined;
          });
        let verb: Promise<string>;
        const fireVerb = () =>
          engine.ops.cancel(id, { reason: 'race' }, O).then(
            (r) => `verb:${r.state}`,
            (e: FlowError) => `refused:${e.code}`,
          );
        if (workerFirst) {
          held.release();
          await queued(1);
          verb = fireVerb();
          await queued(2);
        } else {
          verb = fireVerb();
          await queued(1);
          held.release();
          await queued(2);
        }
        await barrier.query('COMMIT');
        const verbResult = await verb;
        const commit = await waitFor('the worker to commit or be fenced', async () => seen.find((s) => s.from.id === id && s.t.cause === 'step_succeeded' && s.from.state === 'processing' && s.t.instance.state === 'completed'));
        const record = await engine.get(id, ENV);
        const audit = await engine.ops.audit(id, { env: ENV });
        const verbWon = verbResult === 'verb:cancelled' && !commit.committed && record.state === 'cancelled' && audit.length === 1;
        const workerWon = verbResult === 'refused:FLOW_VERB_NOT_ALLOWED' && commit.committed && record.state === 'completed' && audit.length === 0;
        expect({ verbResult, committed: commit.committed, state: record.state, audit: audit.length, oneWinner: verbWon !== workerWon }).toMatchObject({ oneWinner: true });
        // with a FIFO row-lock queue the first in line wins
        expect(workerFirst ? workerWon : verbWon).toBe(true);
        winners.push(verbWon ? 'verb' : 'worker');
      } finally {
        await barrier.query('ROLLBACK').catch(() => {});
        barrier.release();
      }
    }
    expect(winners).toEqual(['worker', 'verb', 'worker', 'verb']);
  });

  it('random verbs while workers run: every state and transition is in the table, each attempt commits once, audit = verbs', async () => {
    Object.assign(chance, { b503: 0.3, b422: 0.05, undo503: 0.15 });
    const quick = { maxAttempts: 2, initialMs: 5, maxMs: 20 };
    const logic = uniqueLogic({
      modules: TEST_MODULES,
      input: { type: 'object' },
      start: 'a',
      steps: {
        a: { ...func('a'), compensate: { ...func('undo-a'), retry: quick }, next: 'b' },
        b: { ...func('b'), retry: quick, compensate: { ...func('undo-b'), retry: quick }, next: 'approve' },
        approve: { kind: 'decision', options: ['ok'], next: 'c' },
        c: func('c'),
      },
    });
    await engine.publishVersion(ENV, logic, TEST_MODULE_BYTES);
    const n = driver === 'postgres' ? 120 : 40;
    const ids: string[] = [];
    for (let i = 0; i < n; i++) ids.push((await engine.start({ logicId: logic.logicId, input: { i }, env: ENV })).id);

    const verbs: Record<string, (id: string) => Promise<unknown>> = {
      cancel: (id) => engine.ops.cancel(id, { reason: 'stress', compensate: Math.random() < 0.5 }, O),
      resume: (id) => engine.resume(id, { step: 'approve', option: 'ok', approver: OPERATOR.actor }, { env: ENV }),
      retry: (id) => engine.ops.retry(id, O),
      force_complete: (id) => engine.ops.forceComplete(id, { step: ['b', 'approve', 'c'][Math.floor(Math.random() * 3)]!, output: { forced: true } }, O),
      replay_from: (id) => engine.ops.replayFrom(id, { step: 'b' }, O),
      repair: (id) => engine.ops.repair(id, { rewindTo: 'a' }, O),
    };
    const names = Object.keys(verbs);
    const succeeded = new Map<string, number>();
    const tally: Record<string, { ok: number; refused: number }> = Object.fromEntries(names.map((v) => [v, { ok: 0, refused: 0 }]));
    const unexpected: string[] = [];
    const total = driver === 'postgres' ? 360 : 120;
    let fired = 0;
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (fired < total) {
          fired++;
          await sleep(Math.floor(Math.random() * 12));
          const id = ids[Math.floor(Math.random() * ids.length)]!;
          const verb = names[Math.floor(Math.random() * names.length)]!;
          try {
            await verbs[verb]!(id);
            tally[verb]!.ok++;
            succeeded.set(id, (succeeded.get(id) ?? 0) + 1);
          } catch (err) {
            // a refusal (4xx FlowError: not allowed now, wrong step, lost a race) changes nothing
            if (err instanceof FlowError && err.status >= 400 && err.status < 500) tally[verb]!.refused++;
            else unexpected.push(`${verb} ${id}: ${(err as Error).stack}`);
          }
        }
      }),
    );
    const counts = await waitUntilAtRest(getDb(), { allowWaiting: true, timeoutMs: 60_000 });
    console.log(`verb races [${driver}]: ${n} instances ${JSON.stringify(counts)}; verbs ${JSON.stringify(tally)}; ${lx.ledger.deliveries.length} calls; ${seen.filter((s) => !s.committed).length} fenced worker commits`);

    expect(unexpected).toEqual([]);
    expect(errors).toEqual([]);
    const db = getDb();
    // every committed transition, by a worker or a verb, is a row of the table
    const off = seen.filter((s) => s.committed && !isAllowedTransition(s.from.state, s.t.cause, s.t.instance.state));
    expect(off.map((s) => `${s.from.state} --${s.t.cause}--> ${s.t.instance.state}`)).toEqual([]);
    const audit = await db.pool.query<{ workflow_id: string; verb: string; before: { state: WorkflowState }; after: { state: WorkflowState } }>(
      'SELECT workflow_id, verb, before, after FROM audit WHERE workflow_id = ANY($1::uuid[]) ORDER BY id',
      [ids],
    );
    const badAudit = audit.rows.filter((a) => !isAllowedTransition(a.before.state, `verb.${a.verb}` as TransitionCause, a.after.state));
    expect(badAudit).toEqual([]);
    // one audit row per successful verb, per instance
    const perInstance = new Map<string, number>();
    for (const a of audit.rows) perInstance.set(a.workflow_id, (perInstance.get(a.workflow_id) ?? 0) + 1);
    expect(perInstance).toEqual(succeeded);
    expect(await attemptViolations(db)).toEqual([]);
    // a parked instance waits on exactly its open decision
    const waiting = await db.pool.query<{ id: string; open: string[] }>(
      `SELECT w.id, array_agg(s.state || ':' || s.step ORDER BY s.seq) FILTER (WHERE s.state IN ('running', 'parked')) AS open
       FROM workflows w JOIN step_runs s ON s.workflow_id = w.id WHERE w.state = 'waiting' AND w.id = ANY($1::uuid[]) GROUP BY w.id`,
      [ids],
    );
    expect(waiting.rows.filter((r) => r.open?.join() !== 'parked:approve')).toEqual([]);
    // no call arrived for a key whose success was already committed, and each effect applied once
    expect(lx.ledger.deliveries.filter((d) => d.afterCommit)).toEqual([]);
    expect([...lx.ledger.applications.values()].filter((k) => k !== 1)).toEqual([]);
    // every committed success was applied; an applied effect never committed was overtaken by a verb
    const applied = lx.ledger.appliedKeys();
    const committedKeys = new Set((await succeededKeys(db)).filter((k) => !k.includes(':approve:')));
    expect([...committedKeys].filter((k) => !applied.has(k) && ids.some((id) => k.startsWith(id)))).toEqual([]);
    const superseded = new Set(
      (await db.pool.query<{ k: string }>(`SELECT idempotency_key AS k FROM step_runs WHERE state = 'superseded' AND idempotency_key IS NOT NULL`)).rows.map((r) => r.k),
    );
    const mine = [...applied].filter((k) => ids.some((id) => k.startsWith(id)));
    expect(mine.filter((k) => !committedKeys.has(k) && !superseded.has(k))).toEqual([]);
    Object.assign(chance, { b503: 0, b422: 0, undo503: 0 });
  }, 120_000);
});
