import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalJson, type LogicVersion, type StepDef, type StepOutcome, TERMINAL_STATES } from '../../contracts/index.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import type { Db } from '../../engine/store/db.ts';
import { exportTrace, type Fake, TestRunner } from '../../engine/testing/index.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { closeTestDb, openTestDb } from '../support/db.ts';
import type { Reply } from '../support/fake-service.ts';
import { LedgerService } from '../support/ledger-service.ts';
import { attemptViolations, waitFor } from '../support/store-checks.ts';
import { killAll, WorkerProcess } from '../support/worker-process.ts';

/**
 * The replay and compensation-order properties, on the real engine: the random definitions and
 * outcome schedules of test/engine/replay.property.test.ts run on a worker process against
 * Postgres, with the worker killed (-9) at random calls after the owning service applied them and
 * before the worker could commit. Each run must decide exactly what the in-process runner decides
 * for the same instance, apply each key at most once per crash-free delivery, never call a key
 * whose success is committed, and undo in the exact reverse of the registrations the path made.
 *
 * Worker processes need a server that several processes share: skipped on PGlite.
 * `npm run soak` raises the number of runs (FLOW_PROP_RUNS).
 */
const DATABASE_URL = process.env['DATABASE_URL'];
const RUNS = Number(process.env['FLOW_PROP_RUNS'] ?? 8);
const ENV = 'prop';
const LEASE_MS = 1500;

type Kind = 'proxy' | 'pass' | 'choice';
interface Shape {
  kind: Kind;
  compensate: boolean;
  onError: number | null;
  maxAttempts: number;
}
type O3 = 'ok' | 'transient' | 'permanent';

const shapes = fc.array(
  fc.record({
    kind: fc.constantFrom<Kind>('proxy', 'proxy', 'proxy', 'pass', 'choice'),
    compensate: fc.constantFrom(true, true, false),
    onError: fc.option(fc.integer({ min: 1, max: 3 }), { nil: null }),
    maxAttempts: fc.integer({ min: 1, max: 3 }),
  }),
  { minLength: 2, maxLength: 6 },
);
const schedules = fc.array(fc.constantFrom<O3>('ok', 'ok', 'ok', 'transient', 'permanent'), { maxLength: 24 });
/** Which deliveries of the run crash their worker after the effect (indexes into the run's calls). */
const crashes = fc.uniqueArray(fc.integer({ min: 0, max: 6 }), { maxLength: 2 }).map((a) => [...a].sort((x, y) => x - y));

let runNo = 0;
/** The step every call of which is refused in this run, or -1. */
let declineAt = -1;
function logicOf(list: Shape[]): LogicVersion {
  const name = (i: number) => (i < list.length ? `s${i}` : null);
  const steps: Record<string, StepDef> = {};
  list.forEach((s, i) => {
    const next = name(i + 1);
    const base = next === null ? {} : { next };
    if (s.kind === 'pass') steps[`s${i}`] = { kind: 'pass', input: `{ "i": ${i}, "prev": steps.s${i - 1} }`, ...base };
    else if (s.kind === 'choice' && next !== null) {
      const skip = name(i + 2) ?? next;
      steps[`s${i}`] = { kind: 'choice', branches: [{ when: `input.n % ${i + 2} = 0`, next: skip }], otherwise: next };
    } else {
      const onError = s.onError === null ? null : name(i + s.onError);
      steps[`s${i}`] = {
        kind: 'proxy',
        path: `/s${i}`,
        input: `{ "n": input.n, "step": ${i} }`,
        retry: { maxAttempts: s.maxAttempts, initialMs: 20, maxMs: 60 },
        ...(s.compensate ? { compensate: { kind: 'proxy' as const, path: `/undo${i}`, input: `{ "undo": ${i} }`, retry: { initialMs: 20, maxMs: 60 } } } : {}),
        ...(onError === null ? {} : { onError }),
        ...base,
      };
    }
  });
  return makeLogic({ logicId: `prop.real${++runNo}`, start: 's0', steps });
}

/** The answer to attempt `attempt` of `op` (`/s3`, `/undo3`): a pure function, so a re-delivery after a crash gets the same one. */
function answerOf(schedule: O3[], op: string, attempt: number): O3 {
  const m = /^\/(s|undo)(\d+)$/.exec(op)!;
  // half the runs refuse their last step that calls out: paths that unwind several compensations come up often
  if (m[1] === 's' && Number(m[2]) === declineAt) return 'permanent';
  const i = Number(m[2]) * 3 + attempt - 1 + (m[1] === 'undo' ? 11 : 0);
  return schedule.length === 0 ? 'ok' : schedule[i % schedule.length]!;
}

/** What differs between two runs that decide the same: error messages name the worker's URL. */
function decisions(list: unknown[]): string {
  return canonicalJson(list).replace(/"message":"(?:[^"\\]|\\.)*"/g, '"message":"…"');
}

describe.skipIf(!DATABASE_URL)('the replay and compensation properties on the real worker pool, with crashes between effect and commit', () => {
  let db: Db;
  let svc: LedgerService;
  let engine: Engine;
  let worker: WorkerProcess;
  const everyWorker: WorkerProcess[] = [];
  let schedule: O3[] = [];
  let incarnation = 0;
  const tally = { runs: 0, crashes: 0, states: {} as Record<string, number> };

  const reply = (op: string) => (_body: unknown, info: { attempt: number }): Reply => {
    const o = answerOf(schedule, op, info.attempt);
    if (o === 'ok') return { status: 200, body: { from: op, attempt: info.attempt } };
    return o === 'transient' ? { status: 503, body: { message: 'unavailable' } } : { status: 422, body: { message: 'refused' } };
  };

  async function spawnWorker(): Promise<void> {
    worker = await WorkerProcess.start({
      databaseUrl: DATABASE_URL!,
      schema: db.schema,
      env: ENV,
      handlerUrl: svc.mount(`/p${incarnation++}`),
      concurrency: 2,
      leaseMs: LEASE_MS,
      pollMs: 50,
    });
    everyWorker.push(worker);
  }

  beforeAll(async () => {
    db = await openTestDb('postgres', { poolSize: 4 });
    const operations: Record<string, (b: unknown, i: { attempt: number }) => Reply> = {};
    for (let i = 0; i < 6; i++) {
      operations[`/s${i}`] = reply(`/s${i}`);
      operations[`/undo${i}`] = reply(`/undo${i}`);
    }
    svc = await new LedgerService({
      operations,
      committed: async (info) => {
        const res = await db.pool.query(`SELECT 1 FROM step_runs WHERE idempotency_key = $1 AND kind = $2 AND state = 'succeeded'`, [info.key, info.kind]);
        return (res.rowCount ?? 0) > 0;
      },
    }).listen();
    engine = new Engine({ db, env: ENV });
    await spawnWorker();
  }, 60_000);

  afterAll(async () => {
    console.log(`real-engine property: ${tally.runs} runs, ${tally.crashes} crashes between effect and commit, ends ${JSON.stringify(tally.states)}`);
    await killAll(everyWorker);
    await svc?.close();
    if (db) await closeTestDb(db);
  });

  async function stateOf(id: string): Promise<string> {
    const res = await db.pool.query<{ state: string }>('SELECT state FROM workflows WHERE id = $1', [id]);
    return res.rows[0]!.state;
  }

  it('decides as the in-process runner, applies each key once, never re-runs a committed step, undoes in exact reverse', async () => {
    await fc.assert(
      fc.asyncProperty(shapes, schedules, fc.integer({ min: 0, max: 100 }), crashes, fc.boolean(), async (list, sched, n, crashAt, decline) => {
        schedule = sched;
        // the last step that calls out (a choice with nowhere to skip to is one too: see logicOf)
        const callsOut = list.map((s, i) => s.kind === 'proxy' || (s.kind === 'choice' && i === list.length - 1));
        declineAt = decline ? callsOut.lastIndexOf(true) : -1;
        const logic = logicOf(list);
        await engine.publish(logic, ENV);
        const base = svc.ledger.deliveries.length;
        const { id } = await engine.start({ logicId: logic.logicId, input: { n }, env: ENV });

        // crash points: the worker is killed once the service has applied the call, before its commit
        const crashed: string[] = [];
        for (const k of crashAt) {
          const hold = svc.intercept(() => svc.ledger.deliveries.length - base === k, 'after-effect');
          const caught = await Promise.race([
            hold.arrived,
            waitFor('the instance to end', async () => (TERMINAL_STATES.has((await stateOf(id)) as never) ? null : undefined), { timeoutMs: 60_000 }),
          ]);
          if (caught === null) {
            if (hold.disarm()) break;
          }
          const d = await hold.arrived;
          await worker.kill();
          hold.release();
          crashed.push(`${d.key}#${d.attempt}`);
          await spawnWorker();
        }
        const final = await waitFor('the instance to end', async () => {
          const s = await stateOf(id);
          return TERMINAL_STATES.has(s as never) ? s : undefined;
        }, { timeoutMs: 60_000 });

        tally.runs++;
        tally.crashes += crashed.length;
        tally.states[final] = (tally.states[final] ?? 0) + 1;

        // 1. the same decisions as the in-process runner makes for this instance and these answers
        const fake: Fake = (call) => {
          const op = call.kind === 'step' ? `/${call.step}` : `/undo${call.step.slice(1)}`;
          const o = answerOf(schedule, op, call.attempt);
          const outcome: StepOutcome =
            o === 'ok'
              ? { status: 'succeeded', output: { from: op, attempt: call.attempt } }
              : { status: 'failed', retryable: o === 'transient', error: { code: o === 'transient' ? 'HTTP_503' : 'HTTP_422', message: '', status: o === 'transient' ? 503 : 422 } };
          return outcome;
        };
        const fakes: Record<string, Fake> = {};
        for (const s of Object.values(logic.steps)) {
          if (s.kind === 'proxy') fakes[`test${s.path}`] = fake;
          if (s.compensate?.kind === 'proxy') fakes[`test${s.compensate.path}`] = fake;
        }
        const expected = await new TestRunner(logic, fakes).run({ n }, { id, env: ENV });
        const trace = await exportTrace(db, ENV, id);
        expect(final).toBe(expected.instance.state);
        expect(decisions(trace.entries.map((e) => e.decision))).toBe(decisions(expected.trace.entries.flatMap((e) => (e.decision === null ? [] : [e.decision]))));

        // 2. each key is applied at most once, and delivered again only after a crash at it
        const mine = svc.ledger.deliveries.slice(base);
        const perAttempt = new Map<string, number>();
        for (const d of mine) perAttempt.set(`${d.key}#${d.attempt}`, (perAttempt.get(`${d.key}#${d.attempt}`) ?? 0) + 1);
        const allowed = (k: string) => 1 + crashed.filter((c) => c === k).length;
        expect([...perAttempt].filter(([k, count]) => count > allowed(k))).toEqual([]);
        expect(mine.filter((d) => d.outcome === 'applied').map((d) => d.key).filter((k, i, all) => all.indexOf(k) !== i)).toEqual([]);
        // 3. no call for a key arrived after its success was committed; no attempt row is doubled
        expect(mine.filter((d) => d.afterCommit)).toEqual([]);
        expect(await attemptViolations(db)).toEqual([]);

        // 4. compensations: the exact reverse of the registrations made by the path taken. Each first
        // attempt of a compensable step registers one (its key names the visit), and a permanent
        // refusal withdraws it (the call took no effect); nothing is merged.
        const refused = new Set(mine.filter((d) => d.outcome === 'refused').map((d) => d.key));
        const registered: string[] = [];
        for (const d of mine) {
          if (d.kind !== 'step' || d.attempt !== 1 || refused.has(d.key) || !logic.steps[d.key.split(':')[1]!]?.compensate) continue;
          if (!registered.includes(d.key)) registered.push(d.key);
        }
        const undone = await db.pool.query<{ key: string }>(
          `SELECT idempotency_key AS key FROM step_runs WHERE workflow_id = $1 AND kind = 'compensation' AND state = 'succeeded' ORDER BY seq`,
          [id],
        );
        const expectedUndo = [...registered].reverse().map((k) => `${k}:compensate`);
        const actualUndo = undone.rows.map((r) => r.key);
        if (final === 'compensated') expect(actualUndo).toEqual(expectedUndo);
        else expect(actualUndo).toEqual(expectedUndo.slice(0, actualUndo.length));
      }),
      { numRuns: RUNS, endOnFailure: true },
    );
  }, 120_000 + RUNS * 30_000);
});
