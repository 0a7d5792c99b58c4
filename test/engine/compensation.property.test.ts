import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { FlowError, type LogicVersion, type StepDef, type StepOutcome } from '../../contracts/index.ts';
import type { Instance } from '../../engine/core/instance.ts';
import { apply, decisionOf, type Fake, type FakeCall, type FlowHandle, TestRunner, type TraceEvent } from '../../engine/testing/index.ts';
import { makeLogic } from '../contracts/helpers.ts';

/**
 * Compensation order and idempotency keys, judged against the calls the fake services received,
 * never against the engine's own registration list. A model replays the calls as they arrive:
 *
 * - a step's call with a key new for (instance, step, generation) is the next visit of that step
 *   there: its key must be `<id>:<step>:<generation>`, with `:visit:<k>` from the second visit on;
 * - the first call of each visit of a compensable step registers its compensation; a permanent
 *   refusal of that call withdraws it (it took no effect);
 * - every compensation call must be for the last registration not yet undone, and a success undoes it;
 * - an instance that ends `compensated` (or `cancelled` after a cancel that compensates) has undone
 *   every registration.
 *
 * The definitions loop (a choice jumps back to an earlier step until its visit count is reached),
 * fan out to children that register compensations of their own, and meet operator verbs once they
 * rest: retry, repair (most often at the start, so a looped step is repaired) and cancel with
 * compensation. Coverage is asserted at the end: a property that never unwinds two compensations
 * proves nothing about their order.
 */

const RUNS = 300;
type O3 = 'ok' | 'transient' | 'permanent';
type Kind = 'proxy' | 'pass' | 'loop' | 'children';
interface Shape {
  kind: Kind;
  compensate: boolean;
  onError: number | null;
  maxAttempts: number;
  back: number;
  times: number;
}
type Verb = { verb: 'retry' } | { verb: 'repair'; at: number } | { verb: 'cancel' };

const shapes = fc
  .array(
    fc.record({
      kind: fc.constantFrom<Kind>('proxy', 'proxy', 'proxy', 'pass', 'loop', 'loop', 'children'),
      compensate: fc.constantFrom(true, true, true, false),
      onError: fc.option(fc.integer({ min: 1, max: 2 }), { nil: null, freq: 4 }),
      maxAttempts: fc.integer({ min: 1, max: 3 }),
      back: fc.integer({ min: 1, max: 4 }),
      times: fc.integer({ min: 2, max: 3 }),
    }),
    { minLength: 2, maxLength: 7 },
  )
  .map((list) => list.map((s, i) => (i === list.length - 1 && s.kind === 'loop' ? { ...s, kind: 'proxy' as const } : s)))
  // a third of the definitions start with a compensable step and a loop back to it, so looped
  // visits are registered, unwound and repaired often
  .chain((list) =>
    fc.constantFrom(list, list, [
      { ...list[0]!, kind: 'proxy' as const, compensate: true, onError: null },
      { ...list[1]!, kind: 'loop' as const, back: 1 },
      ...list.slice(2),
    ]),
  );
const verbs = fc.array(
  fc.oneof(
    fc.constant<Verb>({ verb: 'retry' }),
    fc.constant<Verb>({ verb: 'retry' }),
    fc.constant<Verb>({ verb: 'repair', at: 0 }),
    fc.constant<Verb>({ verb: 'repair', at: 0 }),
    fc.integer({ min: 0, max: 6 }).map((at): Verb => ({ verb: 'repair', at })),
    fc.constant<Verb>({ verb: 'cancel' }),
  ),
  { maxLength: 3 },
);
const schedule = fc.array(fc.constantFrom<O3>('ok', 'ok', 'ok', 'ok', 'transient', 'permanent'), { maxLength: 30 });
const compSchedule = fc.array(fc.constantFrom<O3>('ok', 'ok', 'ok', 'ok', 'ok', 'transient', 'permanent'), { maxLength: 8 });
const CHILD_ID = 'prop.comp.child';

function logicOf(list: Shape[]): LogicVersion {
  const name = (i: number) => (i < list.length ? `s${i}` : null);
  const steps: Record<string, StepDef> = {};
  list.forEach((s, i) => {
    const next = name(i + 1);
    const base = next === null ? {} : { next };
    const onError = s.onError === null ? null : name(i + s.onError);
    const routeOnError = onError === null ? {} : { onError };
    const target = i - s.back;
    if (s.kind === 'loop' && next !== null && target >= 0 && list[target]!.kind === 'proxy') {
      // back to the target until it has run `times` visits in this generation (its output names its visit)
      steps[`s${i}`] = {
        kind: 'choice',
        branches: [{ when: `$exists(steps.s${target}.visit) and steps.s${target}.visit < ${s.times}`, next: `s${target}` }],
        otherwise: next,
      };
    } else if (s.kind === 'pass' || s.kind === 'loop') {
      steps[`s${i}`] = { kind: 'pass', input: `{ "i": ${i} }`, ...base };
    } else if (s.kind === 'children') {
      steps[`s${i}`] = {
        kind: 'children',
        logicId: CHILD_ID,
        items: `[${Array.from({ length: s.times }, (_, k) => k).join(',')}]`,
        itemInput: '{ "item": item, "n": input.n }',
        failurePolicy: s.compensate ? 'all_settled' : 'fail_fast',
        ...routeOnError,
        ...base,
      };
    } else {
      steps[`s${i}`] = {
        kind: 'proxy',
        path: `/s${i}`,
        input: `{ "n": input.n, "step": ${i} }`,
        retry: { maxAttempts: s.maxAttempts, initialMs: 100 },
        ...(s.compensate ? { compensate: { kind: 'proxy' as const, path: `/undo${i}`, input: `{ "undo": ${i} }` } } : {}),
        ...routeOnError,
        ...base,
      };
    }
  });
  return makeLogic({ logicId: 'prop.comp', start: 's0', steps });
}

/** Children: three compensable steps; the last refuses for item 1 when the run says so. */
const childLogic = makeLogic({
  logicId: CHILD_ID,
  start: 'c0',
  steps: Object.fromEntries(
    [0, 1, 2].map((i) => [
      `c${i}`,
      {
        kind: 'proxy',
        path: `/c${i}`,
        input: '{ "item": input.item }',
        retry: { maxAttempts: 2, initialMs: 50 },
        compensate: { kind: 'proxy', path: `/uc${i}`, input: `{ "undo": ${i} }` },
        ...(i < 2 ? { next: `c${i + 1}` } : {}),
      },
    ]),
  ) as Record<string, StepDef>,
});

const failed = (o: 'transient' | 'permanent'): StepOutcome => ({ status: 'failed', retryable: o === 'transient', error: { code: o, message: o } });
const visitOf = (key: string) => Number(/:visit:(\d+)$/.exec(key)?.[1] ?? 1);

/** What the model knows of one instance, from the calls alone. */
interface Seen {
  /** Step keys in visit order, per `<step>:<generation>`. */
  visits: Map<string, string[]>;
  /** Registered step keys, in registration order. */
  registered: string[];
  undone: Set<string>;
  compensations: number;
}

const coverage = { runs: 0, unwoundTwo: 0, loopUnwound: 0, repairedLoop: 0, retried: 0, childUnwound: 0 };

describe('compensations and keys, judged by the calls the services received', () => {
  afterAll(() => {
    console.log(`compensation property coverage: ${JSON.stringify(coverage)}`);
  });

  it('keys name each visit of each generation; compensations run last registered first, each once; an unwound instance undid all', async () => {
    await fc.assert(
      fc.asyncProperty(
        shapes,
        schedule,
        compSchedule,
        verbs,
        fc.constantFrom(true, true, true, false),
        fc.boolean(),
        fc.integer({ min: 0, max: 100 }),
        async (list, sched, compSched, script, declineLast, childDecline, n) => {
          const logic = logicOf(list);
          const lastProxy = list.map((_s, i) => (logic.steps[`s${i}`]?.kind === 'proxy' ? i : -1)).reduce((a, b) => Math.max(a, b), -1);
          const seen = new Map<string, Seen>();
          let rootId = '';
          let generation = 0;
          let i = 0;
          let j = 0;
          const of = (id: string): Seen => {
            const s = seen.get(id) ?? { visits: new Map(), registered: [], undone: new Set<string>(), compensations: 0 };
            seen.set(id, s);
            return s;
          };
          const answer = (call: FakeCall, child: boolean): StepOutcome => {
            const id = call.idempotencyKey.split(':')[0]!;
            const s = of(id);
            const def = (child ? childLogic : logic).steps[call.step];
            if (call.kind === 'compensation') {
              const pending = s.registered.filter((k) => !s.undone.has(k));
              expect(call.idempotencyKey, `${id}: the compensation of the last registration not undone`).toBe(`${pending.at(-1)}:compensate`);
              const o = compSched[j++] ?? 'ok';
              if (o !== 'ok') return failed(o);
              s.undone.add(pending.at(-1)!);
              s.compensations++;
              return { status: 'succeeded', output: { undone: call.step } };
            }
            const g = id === rootId ? generation : 0;
            const visits = s.visits.get(`${call.step}:${g}`) ?? [];
            if (!visits.includes(call.idempotencyKey)) {
              const k = visits.length + 1;
              expect(call.idempotencyKey, `${id}: visit ${k} of ${call.step} in generation ${g}`).toBe(`${id}:${call.step}:${g}${k > 1 ? `:visit:${k}` : ''}`);
              visits.push(call.idempotencyKey);
              s.visits.set(`${call.step}:${g}`, visits);
            }
            if (def?.kind === 'proxy' && def.compensate !== undefined && !s.registered.includes(call.idempotencyKey)) s.registered.push(call.idempotencyKey);
            const declined = child ? childDecline && call.step === 'c2' && (call.input as { item: number }).item === 1 : declineLast && call.step === `s${lastProxy}`;
            const o = declined ? 'permanent' : (sched[i++] ?? 'ok');
            if (o === 'permanent') s.registered = s.registered.filter((k) => k !== call.idempotencyKey);
            return o === 'ok' ? { status: 'succeeded', output: { visit: visitOf(call.idempotencyKey), at: call.step } } : failed(o);
          };
          const fakes: Record<string, Fake> = {};
          for (const k of list.keys()) {
            fakes[`test/s${k}`] = (call) => answer(call, false);
            fakes[`test/undo${k}`] = (call) => answer(call, false);
          }
          for (const k of [0, 1, 2]) {
            fakes[`test/c${k}`] = (call) => answer(call, true);
            fakes[`test/uc${k}`] = (call) => answer(call, true);
          }

          const runner = new TestRunner(logic, fakes, { logics: [childLogic] });
          let flow: FlowHandle = await runner.start({ n });
          rootId = flow.instance.id;
          const tree: FlowHandle[] = [];
          const collect = (h: FlowHandle) => {
            tree.push(...h.children);
            for (const c of h.children) collect(c);
          };
          collect(flow);
          const looped = () => [...(seen.get(rootId)?.visits.values() ?? [])].some((v) => v.length > 1);
          let repairedLoop = false;
          let retried = false;
          let cancelled = false;
          for (const v of script) {
            const event: TraceEvent =
              v.verb === 'retry'
                ? { type: 'verb', verb: 'retry' }
                : v.verb === 'repair'
                  ? { type: 'verb', verb: 'repair', args: { step: `s${Math.min(v.at, list.length - 1)}` } }
                  : { type: 'verb', verb: 'cancel', args: { reason: 'stop', compensate: true } };
            let t: Awaited<ReturnType<typeof apply>>;
            try {
              t = await apply(logic, flow.instance, event);
            } catch (err) {
              if (err instanceof FlowError) continue; // refused: nothing changes
              throw err;
            }
            // the runner restores from a trace, and cannot restore an instance parked on children
            if (t!.commands.some((c) => c.type === 'spawn')) continue;
            if (v.verb === 'repair') {
              if (looped()) repairedLoop = true;
              generation++;
            }
            if (v.verb === 'retry') retried = true;
            if (v.verb === 'cancel') cancelled = true;
            const entry = { event, decision: decisionOf(t!), atMs: runner.now };
            flow = await runner.restore({ ...flow.trace, entries: [...flow.trace.entries, entry] });
            collect(flow);
          }

          // an instance that unwound undid every registration it made
          const ends: [string, Instance][] = [[rootId, flow.instance], ...tree.map((c): [string, Instance] => [c.instance.id, c.instance])];
          for (const [id, inst] of ends) {
            const s = of(id);
            const unwound = inst.state === 'compensated' || (id === rootId && cancelled && inst.state === 'cancelled');
            if (unwound) expect(s.registered.filter((k) => !s.undone.has(k)), `${id} ended ${inst.state}`).toEqual([]);
          }
          coverage.runs++;
          const most = Math.max(0, ...[...seen.values()].map((s) => s.compensations));
          if (most >= 2) coverage.unwoundTwo++;
          if (most >= 2 && looped()) coverage.loopUnwound++;
          if (repairedLoop) coverage.repairedLoop++;
          if (retried) coverage.retried++;
          if (tree.some((c) => (seen.get(c.instance.id)?.compensations ?? 0) >= 2)) coverage.childUnwound++;
        },
      ),
      { numRuns: RUNS },
    );
    // the floors: below them the property proves too little about what it names
    expect(coverage.unwoundTwo / coverage.runs, 'runs that unwind two or more compensations').toBeGreaterThanOrEqual(0.2);
    expect(coverage.loopUnwound / coverage.runs, 'runs that loop, then unwind two or more').toBeGreaterThanOrEqual(0.05);
    expect(coverage.repairedLoop / coverage.runs, 'runs that repair a looped step').toBeGreaterThanOrEqual(0.05);
    expect(coverage.retried / coverage.runs, 'runs that retry').toBeGreaterThanOrEqual(0.05);
    expect(coverage.childUnwound / coverage.runs, 'runs where a child unwinds two or more').toBeGreaterThanOrEqual(0.05);
  }, 120_000);
});
