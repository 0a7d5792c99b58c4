import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalJson, type LogicVersion, type StepDef, type StepOutcome, TERMINAL_STATES } from '../../contracts/index.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import type { Db } from '../../engine/store/db.ts';
import { advanceClock } from '../../engine/store/timers.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { apply, decisionOf, exportTrace, type Fake, type FlowHandle, TestRunner, type TraceEvent } from '../../engine/testing/index.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { closeTestDb, openTestDb } from '../support/db.ts';
import { OPERATOR } from '../support/engine.ts';
import type { Reply } from '../support/fake-service.ts';
import { LedgerService } from '../support/ledger-service.ts';
import { attemptViolations, waitFor } from '../support/store-checks.ts';
import { killAll, WorkerProcess } from '../support/worker-process.ts';

/**
 * The replay and compensation-order properties, on the real engine: random definitions (proxies,
 * choices, delays, decisions and children that register compensations of their own) and outcome
 * schedules run on a worker process against Postgres, with the worker killed (-9) at random calls
 * after the owning service applied them and before the worker could commit. A parked instance is
 * driven from outside as a user would: a delay by moving the clock, a decision by approving,
 * rejecting or cancelling with compensation. Each run must decide exactly what the in-process
 * runner decides for the same instance and the same outside inputs — the parent and each child,
 * which has the same id in both — apply each key at most once per crash-free delivery, never call
 * a key whose success is committed, and undo in the exact reverse of the registrations the path made.
 *
 * Worker processes need a server that several processes share: skipped on PGlite.
 * `npm run soak` raises the number of runs (FLOW_PROP_RUNS).
 */
const DATABASE_URL = process.env['DATABASE_URL'];
const RUNS = Number(process.env['FLOW_PROP_RUNS'] ?? 8);
const ENV = 'prop';
const LEASE_MS = 1500;

type Kind = 'proxy' | 'pass' | 'choice' | 'delay' | 'decision' | 'children';
interface Shape {
  kind: Kind;
  compensate: boolean;
  onError: number | null;
  maxAttempts: number;
}
type O3 = 'ok' | 'transient' | 'permanent';

const shapes = fc.array(
  fc.record({
    kind: fc.constantFrom<Kind>('proxy', 'proxy', 'proxy', 'pass', 'choice', 'delay', 'decision', 'children'),
    compensate: fc.constantFrom(true, true, false),
    onError: fc.option(fc.integer({ min: 1, max: 3 }), { nil: null }),
    maxAttempts: fc.integer({ min: 1, max: 3 }),
  }),
  { minLength: 2, maxLength: 6 },
);
const schedules = fc.array(fc.constantFrom<O3>('ok', 'ok', 'ok', 'transient', 'permanent'), { maxLength: 24 });
/** Which deliveries of the run crash their worker after the effect (indexes into the run's calls). */
const crashes = fc.uniqueArray(fc.integer({ min: 0, max: 6 }), { maxLength: 2 }).map((a) => [...a].sort((x, y) => x - y));
/** What the outside does at the k-th decision the instance parks on. */
type Answer = 'approve' | 'reject' | 'cancel';
const answers = fc.array(fc.constantFrom<Answer>('approve', 'approve', 'reject', 'cancel'), { maxLength: 4 });
const DELAY_MS = 5 * 60_000;
const APPROVER = { subject: 'ann@example.com', scopes: ['flow:admin'] };

/** Children: a compensable call, then one that may fail. */
const CHILD = makeLogic({
  logicId: 'prop.real.child',
  start: 'c0',
  steps: {
    c0: { kind: 'proxy', path: '/c0', input: '{ "item": input.item }', retry: { maxAttempts: 2, initialMs: 20, maxMs: 60 }, compensate: { kind: 'proxy', path: '/uc0', input: '{ "undo": 0 }', retry: { initialMs: 20, maxMs: 60 } }, next: 'c1' },
    c1: { kind: 'proxy', path: '/c1', input: '{ "item": input.item }', retry: { maxAttempts: 2, initialMs: 20, maxMs: 60 } },
  },
});

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
    else if (s.kind === 'delay') steps[`s${i}`] = { kind: 'delay', duration: 'PT5M', ...base };
    else if (s.kind === 'decision') steps[`s${i}`] = { kind: 'decision', input: `{ "n": input.n, "at": ${i} }`, options: ['approve', 'reject'], ...base };
    else if (s.kind === 'children') {
      steps[`s${i}`] = {
        kind: 'children',
        logicId: CHILD.logicId,
        items: `[${Array.from({ length: s.maxAttempts }, (_, k) => k).join(',')}]`,
        itemInput: '{ "item": item, "n": input.n }',
        failurePolicy: s.compensate ? 'all_settled' : 'fail_fast',
        ...base,
      };
    }
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

/** The answer to attempt `attempt` of `op` (`/s3`, `/undo3`, `/c1`, `/uc0`): a pure function, so a re-delivery after a crash gets the same one. */
function answerOf(schedule: O3[], op: string, attempt: number): O3 {
  const m = /^\/(s|undo|c|uc)(\d+)$/.exec(op)!;
  // half the runs refuse their last step that calls out: paths that unwind several compensations come up often
  if (m[1] === 's' && Number(m[2]) === declineAt) return 'permanent';
  const i = Number(m[2]) * 3 + attempt - 1 + ({ s: 0, undo: 11, c: 5, uc: 17 } as Record<string, number>)[m[1]!]!;
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
  const tally = { runs: 0, crashes: 0, children: 0, parked: 0, states: {} as Record<string, number> };

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
    for (const op of ['/c0', '/c1', '/uc0']) operations[op] = reply(op);
    svc = await new LedgerService({
      operations,
      committed: async (info) => {
        const res = await db.pool.query(`SELECT 1 FROM step_runs WHERE idempotency_key = $1 AND kind = $2 AND state = 'succeeded'`, [info.key, info.kind]);
        return (res.rowCount ?? 0) > 0;
      },
    }).listen();
    engine = new Engine({ db, env: ENV });
    await engine.publish(CHILD, ENV);
    await spawnWorker();
  }, 60_000);

  afterAll(async () => {
    console.log(
      `real-engine property: ${tally.runs} runs, ${tally.crashes} crashes between effect and commit, ${tally.children} children, ${tally.parked} parkings driven from outside, ends ${JSON.stringify(tally.states)}`,
    );
    await killAll(everyWorker);
    await svc?.close();
    if (db) await closeTestDb(db);
  });

  /** Where the instance rests: ended, or parked quietly on a delay or decision the test has not acted on yet. */
  type Rest = { kind: 'end'; state: string } | { kind: 'delay' | 'decision'; seq: string; step: string };
  async function restOf(logic: LogicVersion, id: string, acted: Set<string>): Promise<Rest | undefined> {
    const res = await db.pool.query<{ state: string; step: string | null; seq: string | null; quiet: boolean }>(
      `SELECT state, current_step AS step, ctx->'running'->>'seq' AS seq, wakes IS NULL AND lease_token IS NULL AS quiet FROM workflows WHERE id = $1`,
      [id],
    );
    const r = res.rows[0]!;
    if (TERMINAL_STATES.has(r.state as never)) return { kind: 'end', state: r.state };
    const kind = r.step === null ? undefined : logic.steps[r.step]?.kind;
    if (r.state !== 'waiting' || !r.quiet || r.seq === null || acted.has(r.seq) || (kind !== 'delay' && kind !== 'decision')) return undefined;
    return { kind, seq: r.seq, step: r.step! };
  }

  it('decides as the in-process runner, parent and children, applies each key once, never re-runs a committed step, undoes in exact reverse', async () => {
    await fc.assert(
      fc.asyncProperty(shapes, schedules, fc.integer({ min: 0, max: 100 }), crashes, fc.boolean(), answers, async (list, sched, n, crashAt, decline, script) => {
        schedule = sched;
        // the last step that calls out (a choice with nowhere to skip to is one too: see logicOf)
        const callsOut = list.map((s, i) => s.kind === 'proxy' || (s.kind === 'choice' && i === list.length - 1));
        declineAt = decline ? callsOut.lastIndexOf(true) : -1;
        const logic = logicOf(list);
        await engine.publish(logic, ENV);
        const base = svc.ledger.deliveries.length;
        const { id } = await engine.start({ logicId: logic.logicId, input: { n }, env: ENV });

        // Drive it to its end from outside. Crash points: the worker is killed once the service has
        // applied the call, before its commit; a crash point the instance rests before is kept for later.
        const crashed: string[] = [];
        // where in the service's ledger each kill happened: every call the killed worker had made
        // and not yet committed (the held one, and any other child's in flight) may come again
        const kills: number[] = [];
        const queue = [...crashAt];
        const acted = new Set<string>();
        let decided = 0;
        let final: string;
        for (;;) {
          const next = queue[0];
          const hold = next === undefined ? null : svc.intercept(() => svc.ledger.deliveries.length - base === next, 'after-effect');
          let stop = false;
          const rest = waitFor('the instance to rest', async () => (stop ? null : await restOf(logic, id, acted)), { timeoutMs: 60_000 });
          const first = hold === null ? await rest : await Promise.race([hold.arrived.then(() => null), rest]);
          if (hold !== null && (first === null || !hold.disarm())) {
            stop = true;
            await rest;
            const d = await hold.arrived;
            await worker.kill();
            kills.push(svc.ledger.deliveries.length);
            hold.release();
            crashed.push(`${d.key}#${d.attempt}`);
            queue.shift();
            await spawnWorker();
            continue;
          }
          const r = first!;
          if (r.kind === 'end') {
            final = r.state;
            break;
          }
          acted.add(r.seq);
          if (r.kind === 'delay') {
            await asScheduler(db, (c) => advanceClock(c, DELAY_MS + 1000));
            continue;
          }
          const answer = script[decided++] ?? 'approve';
          if (answer === 'cancel') await engine.ops.cancel(id, { reason: 'stop', compensate: true }, { ...OPERATOR, env: ENV });
          else await engine.resume(id, { step: r.step, option: answer, approver: APPROVER }, { env: ENV });
        }

        tally.runs++;
        tally.crashes += crashed.length;
        tally.states[final] = (tally.states[final] ?? 0) + 1;

        // 1. the same decisions as the in-process runner makes for this instance, these answers and
        // these outside inputs, for the parent and for each child
        const fake: Fake = (call) => {
          const op = call.kind === 'step' ? `/${call.step}` : `/${call.step.startsWith('c') ? 'uc' : 'undo'}${call.step.slice(1)}`;
          const o = answerOf(schedule, op, call.attempt);
          const outcome: StepOutcome =
            o === 'ok'
              ? { status: 'succeeded', output: { from: op, attempt: call.attempt } }
              : { status: 'failed', retryable: o === 'transient', error: { code: o === 'transient' ? 'HTTP_503' : 'HTTP_422', message: '', status: o === 'transient' ? 503 : 422 } };
          return outcome;
        };
        const fakes: Record<string, Fake> = {};
        for (const s of [...Object.values(logic.steps), ...Object.values(CHILD.steps)]) {
          if (s.kind === 'proxy') fakes[`test${s.path}`] = fake;
          if (s.kind === 'proxy' && s.compensate?.kind === 'proxy') fakes[`test${s.compensate.path}`] = fake;
        }
        const runner = new TestRunner(logic, fakes, { logics: [CHILD] });
        let flow = await runner.start({ n }, { id, env: ENV });
        const kids: FlowHandle[] = [];
        let answered = 0;
        for (;;) {
          const running = flow.instance.ctx.running;
          const step = flow.instance.state === 'waiting' && running !== null ? logic.steps[running.step] : undefined;
          if (step?.kind === 'delay') {
            await flow.advance(DELAY_MS + 1000);
          } else if (step?.kind === 'decision') {
            const answer = script[answered++] ?? 'approve';
            if (answer !== 'cancel') {
              await flow.resume({ step: running!.step, option: answer, approver: APPROVER });
              continue;
            }
            // the runner has no verbs: the cancel is committed into the trace, which it picks up from
            const event: TraceEvent = { type: 'verb', verb: 'cancel', args: { reason: 'stop', compensate: true } };
            const t = await apply(logic, flow.instance, event);
            kids.push(...flow.children);
            flow = await runner.restore({ ...flow.trace, entries: [...flow.trace.entries, { event, decision: decisionOf(t!), atMs: runner.now }] });
          } else break;
        }
        kids.push(...flow.children);
        const trace = await exportTrace(db, ENV, id);
        expect(final).toBe(flow.instance.state);
        expect(decisions(trace.entries.map((e) => e.decision))).toBe(decisions(flow.trace.entries.flatMap((e) => (e.decision === null ? [] : [e.decision]))));
        const engineKids = await db.pool.query<{ id: string }>('SELECT id FROM workflows WHERE parent_id = $1 ORDER BY parent_seq, branch_index', [id]);
        expect(engineKids.rows.map((r) => r.id), 'the children, by id').toEqual(kids.map((k) => k.instance.id));
        for (const kid of kids) {
          const kidTrace = await exportTrace(db, ENV, kid.instance.id);
          // a fail_fast parent stops the children still running when the first fails: how far each
          // got by then is a race in the engine, and none in the runner (children run to rest first)
          const stopped = (entries: { event: TraceEvent }[]) => entries.some((e) => e.event.type === 'verb');
          if (stopped(kidTrace.entries) || stopped(kid.trace.entries)) continue;
          expect(decisions(kidTrace.entries.map((e) => e.decision)), `child ${kid.instance.id}`).toBe(
            decisions(kid.trace.entries.flatMap((e) => (e.decision === null ? [] : [e.decision]))),
          );
        }
        tally.children += kids.length;
        tally.parked += acted.size;

        // 2. each key is applied at most once, and an attempt is delivered again only after a crash
        // came between (the worker that made the call was killed before it could commit it)
        const mine = svc.ledger.deliveries.slice(base);
        const lastOf = new Map<string, number>();
        const again: string[] = [];
        for (const d of mine) {
          const k = `${d.key}#${d.attempt}`;
          const prev = lastOf.get(k);
          if (prev !== undefined && !kills.some((at) => at > prev && at <= d.n)) again.push(`${k} at ${d.n}, after ${prev}`);
          lastOf.set(k, d.n);
        }
        expect(again, 'attempts delivered again with no crash between').toEqual([]);
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
      { numRuns: RUNS, endOnFailure: true, ...(process.env['FLOW_PROP_SEED'] ? { seed: Number(process.env['FLOW_PROP_SEED']) } : {}) },
    );
  }, 120_000 + RUNS * 30_000);
});
