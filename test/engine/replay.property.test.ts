import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { LogicVersion, StepDef, StepOutcome } from '../../contracts/index.ts';
import type { JsonValue } from '../../engine/core/instance.ts';
import type { Instance } from '../../engine/core/instance.ts';
import type { Fake, FlowHandle, Trace } from '../../engine/testing/index.ts';
import { apply, replay, TestRunner } from '../../engine/testing/index.ts';
import { callHttp } from '../../engine/executors/http-call.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { expectZeroCalls, type Replayer, World } from './replay-tripwires.ts';

type Kind = 'proxy' | 'pass' | 'choice';
interface Shape {
  kind: Kind;
  compensate: boolean;
  onError: number | null; // offset to a later step
  maxAttempts: number;
}

/** Random valid definitions: a chain with choices that skip ahead, onError routes forward, compensations. */
const shapes = fc.array(
  fc.record({
    kind: fc.constantFrom<Kind>('proxy', 'proxy', 'proxy', 'pass', 'choice'),
    compensate: fc.boolean(),
    onError: fc.option(fc.integer({ min: 1, max: 3 }), { nil: null }),
    maxAttempts: fc.integer({ min: 1, max: 3 }),
  }),
  { minLength: 1, maxLength: 7 },
);

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
        retry: { maxAttempts: s.maxAttempts, initialMs: 100 },
        ...(s.compensate ? { compensate: { kind: 'proxy' as const, path: `/undo${i}`, input: `{ "undo": ${i} }` } } : {}),
        ...(onError === null ? {} : { onError }),
        ...base,
      };
    }
  });
  return makeLogic({ logicId: 'prop.flow', start: 's0', steps });
}

const outcomes = fc.array(fc.constantFrom<'ok' | 'transient' | 'permanent'>('ok', 'ok', 'ok', 'transient', 'permanent'), {
  maxLength: 40,
});

/** One fake for every path: plays the schedule in call order, then succeeds. */
function scheduled(schedule: ('ok' | 'transient' | 'permanent')[]) {
  const calls: { key: string; step: string; kind: string }[] = [];
  let i = 0;
  const fake: Fake = (call) => {
    calls.push({ key: call.idempotencyKey, step: call.step, kind: call.kind });
    const o = schedule[i++] ?? 'ok';
    const outcome: StepOutcome =
      o === 'ok'
        ? { status: 'succeeded', output: { from: call.step, attempt: call.attempt } }
        : { status: 'failed', retryable: o === 'transient', error: { code: o, message: o } };
    return outcome;
  };
  return { fake, calls };
}

function fakesFor(logic: LogicVersion, fake: Fake): Record<string, Fake> {
  const out: Record<string, Fake> = {};
  for (const s of Object.values(logic.steps)) {
    if (s.kind === 'proxy') out[`test${s.path}`] = fake;
    if (s.compensate?.kind === 'proxy') out[`test${s.compensate.path}`] = fake;
  }
  return out;
}

/** The replay under test, given everything the live run had. */
const realReplay: Replayer<LogicVersion, Trace> = (logic, trace) => replay(logic, trace);

/**
 * Deliberately broken replays, the mutants the zero-calls check must catch: one re-executes the
 * run through the live fakes, one re-sends each step's effect over HTTP as a naive re-execution
 * through the engine's executors would.
 */
const BROKEN: Record<string, Replayer<LogicVersion, Trace>> = {
  'a replay that re-runs the steps through the fakes': async (logic, trace, world) =>
    (await new TestRunner(logic, world.fakes).run(trace.initial.input, { id: trace.initial.id })).instance,
  'a replay that re-sends each effect over HTTP': async (logic, trace) => {
    for (const e of trace.entries) {
      if (e.event.type === 'outcome') await callHttp({ method: 'POST', url: 'http://127.0.0.1:9/replayed', headers: {}, body: null, timeoutMs: 1000 });
    }
    return replay(logic, trace);
  },
};

describe('replay determinism', () => {
  it('a live run replays to the identical decisions and final record with zero external calls', async () => {
    await fc.assert(
      fc.asyncProperty(shapes, outcomes, fc.integer({ min: 0, max: 100 }), async (list, schedule, n) => {
        const logic = logicOf(list);
        const { fake } = scheduled(schedule);
        const world = new World(fakesFor(logic, fake));
        const live = await new TestRunner(logic, world.fakes).run({ n });
        let replayed: Instance | undefined;
        expectZeroCalls(await world.during(async () => (replayed = await realReplay(logic, live.trace, world))));
        expect(replayed).toEqual(live.instance);
        expect(['completed', 'failed', 'compensated', 'dead_lettered']).toContain(live.instance.state);
      }),
      { numRuns: 300 },
    );
  });

  it('the zero-calls check fails for a replay that calls out (mutation check)', async () => {
    await fc.assert(
      fc.asyncProperty(shapes, outcomes, fc.integer({ min: 0, max: 100 }), async (list, schedule, n) => {
        const logic = logicOf(list);
        const { fake, calls } = scheduled(schedule);
        const world = new World(fakesFor(logic, fake));
        const live = await new TestRunner(logic, world.fakes).run({ n });
        fc.pre(calls.length > 0); // a run that called nothing live has nothing a replay could repeat
        expectZeroCalls(await world.during(() => realReplay(logic, live.trace, world)));
        for (const [name, broken] of Object.entries(BROKEN)) {
          const made = await world.during(() => broken(logic, live.trace, world));
          expect(() => expectZeroCalls(made), name).toThrow();
        }
      }),
      { numRuns: 60 },
    );
  });

  // compensation order: test/engine/compensation.property.test.ts, judged by the calls made

  it('no idempotency key is ever used for two different (step, generation) pairs', async () => {
    await fc.assert(
      fc.asyncProperty(shapes, outcomes, fc.integer({ min: 0, max: 100 }), async (list, schedule, n) => {
        const logic = logicOf(list);
        const { fake, calls } = scheduled(schedule);
        const { trace } = await new TestRunner(logic, fakesFor(logic, fake)).run({ n });
        const owner = new Map<string, string>();
        for (const e of trace.entries)
          for (const a of e.decision?.attempts ?? []) {
            if (a.op !== 'insert' || a.idempotencyKey === null) continue;
            const who = `${a.kind}:${a.step}:${a.generation}`;
            expect(owner.get(a.idempotencyKey) ?? who).toBe(who);
            owner.set(a.idempotencyKey, who);
          }
        for (const c of calls) expect(owner.get(c.key)).toBe(`${c.kind}:${c.step}:0`);
      }),
      { numRuns: 300 },
    );
  });

  it('a replay against a changed decision fails loudly at that event', async () => {
    const logic = logicOf([{ kind: 'proxy', compensate: false, onError: null, maxAttempts: 3 }]);
    const { fake } = scheduled(['transient', 'ok']);
    const { trace } = await new TestRunner(logic, fakesFor(logic, fake)).run({ n: 1 });
    const tampered = structuredClone(trace);
    tampered.entries[1]!.decision!.runAfterMs = 1;
    await expect(replay(logic, tampered)).rejects.toMatchObject({ code: 'FLOW_REPLAY_DIVERGED' });
  });
});

// ---------------------------------------------------------------------------------------------
// Waiting, time and composition: decisions (with and without deadline), delays, 202-parked async
// steps and a children step, driven by random schedules of outcomes, time, resumes and callbacks.
// ---------------------------------------------------------------------------------------------

type WaitKind = Kind | 'decision' | 'delay' | 'async' | 'children' | 'waitFor';
interface WaitShape {
  kind: WaitKind;
  compensate: boolean;
  onError: number | null;
  maxAttempts: number;
  deadline: 'PT1M' | 'PT1H' | null;
  onTimeout: number | null;
  scoped: boolean;
  delay: 'PT10S' | 'PT5M' | 'until';
  items: number;
  policy: 'fail_fast' | 'all_settled';
}
type ChildKind = 'proxy' | 'delay' | 'pass';
type O3 = 'ok' | 'transient' | 'permanent';
type Act =
  | { t: 'advance'; ms: number }
  | { t: 'resume'; valid: boolean; option: number; bad: 'step' | 'option' | 'scope' }
  | { t: 'complete'; o: O3 }
  | { t: 'dup' }
  | { t: 'send'; message: number; key: number; valid: boolean };

const SCOPE = 'flow:approve';
const MESSAGE_SCHEMA = { type: 'object', properties: { v: { type: 'number' } }, required: ['v'] };
const MESSAGE_REFUSALS = ['FLOW_UNKNOWN_MESSAGE', 'FLOW_MESSAGE_PAYLOAD_INVALID', 'FLOW_INSTANCE_ENDED', 'FLOW_MESSAGE_BUFFER_FULL'];
const CHILD_ID = 'prop.child';

const waitShapes = fc.array(
  fc.record({
    kind: fc.constantFrom<WaitKind>('proxy', 'proxy', 'pass', 'choice', 'decision', 'decision', 'delay', 'async', 'async', 'children', 'children', 'waitFor', 'waitFor'),
    compensate: fc.boolean(),
    onError: fc.option(fc.integer({ min: 1, max: 3 }), { nil: null }),
    maxAttempts: fc.integer({ min: 1, max: 3 }),
    deadline: fc.constantFrom<WaitShape['deadline']>(null, 'PT1M', 'PT1H'),
    onTimeout: fc.option(fc.integer({ min: 1, max: 2 }), { nil: null }),
    scoped: fc.boolean(),
    delay: fc.constantFrom<WaitShape['delay']>('PT10S', 'PT5M', 'until'),
    items: fc.integer({ min: 0, max: 3 }),
    policy: fc.constantFrom<WaitShape['policy']>('fail_fast', 'all_settled'),
  }),
  { minLength: 1, maxLength: 7 },
)
  // some definitions fan out first, so fan-in, fail_fast and cancellation come up often; some wait
  // for a message first, so deliveries, buffering and duplicates do
  .chain((list) =>
    fc.constantFrom(list, list, [{ ...list[0]!, kind: 'children' as const }, ...list.slice(1)], [{ ...list[0]!, kind: 'waitFor' as const }, ...list.slice(1)]),
  );
const childShapes = fc.array(fc.constantFrom<ChildKind>('proxy', 'proxy', 'delay', 'delay', 'pass'), { minLength: 1, maxLength: 3 });
const o3 = fc.constantFrom<O3>('ok', 'ok', 'transient', 'permanent');
const acts = fc.array(
  fc.oneof(
    { arbitrary: fc.record({ t: fc.constant('advance' as const), ms: fc.constantFrom(0, 5_000, 30_000, 90_000, 400_000, 3_700_000) }), weight: 3 },
    {
      arbitrary: fc.record({
        t: fc.constant('resume' as const),
        valid: fc.boolean(),
        option: fc.integer({ min: 0, max: 1 }),
        bad: fc.constantFrom<'step' | 'option' | 'scope'>('step', 'option', 'scope'),
      }),
      weight: 3,
    },
    { arbitrary: fc.record({ t: fc.constant('complete' as const), o: o3 }), weight: 3 },
    { arbitrary: fc.record({ t: fc.constant('dup' as const) }), weight: 1 },
    // messages: two names, keys that repeat (duplicates), some payloads that break the schema
    {
      arbitrary: fc.record({
        t: fc.constant('send' as const),
        message: fc.constantFrom(0, 0, 1, 2),
        key: fc.integer({ min: 0, max: 3 }),
        valid: fc.constantFrom(true, true, true, false),
      }),
      weight: 4,
    },
  ),
  { maxLength: 14 },
);

function waitLogicOf(list: WaitShape[]): LogicVersion {
  const name = (i: number) => (i < list.length ? `s${i}` : null);
  const steps: Record<string, StepDef> = {};
  list.forEach((s, i) => {
    const next = name(i + 1);
    const base = next === null ? {} : { next };
    const onError = s.onError === null ? null : name(i + s.onError);
    const routeOnError = onError === null ? {} : { onError };
    const retry = { retry: { maxAttempts: s.maxAttempts, initialMs: 100 } };
    const compensate = s.compensate ? { compensate: { kind: 'proxy' as const, path: `/undo${i}`, input: `{ "undo": ${i} }` } } : {};
    switch (s.kind) {
      case 'pass':
        steps[`s${i}`] = { kind: 'pass', input: `{ "i": ${i}, "prev": steps.s${i - 1} }`, ...base };
        return;
      case 'choice':
        if (next !== null) {
          // right after a decision the choice follows it; elsewhere it follows the input
          const when = `$exists(decision) ? decision.option = "reject" : input.n % ${i + 2} = 0`;
          steps[`s${i}`] = { kind: 'choice', branches: [{ when, next: name(i + 2) ?? next }], otherwise: next };
          return;
        }
        break;
      case 'decision': {
        const onTimeout = s.deadline === null || s.onTimeout === null ? null : name(i + s.onTimeout);
        steps[`s${i}`] = {
          kind: 'decision',
          input: `{ "n": input.n, "at": ${i} }`,
          options: ['approve', 'reject'],
          ...(s.scoped ? { approverScope: SCOPE } : {}),
          ...(s.deadline === null ? {} : { deadline: s.deadline }),
          ...(onTimeout === null ? {} : { onTimeout }),
          ...base,
        };
        return;
      }
      case 'waitFor':
        // the timeout reuses the decision's deadline choice, and takes onError
        steps[`s${i}`] = {
          kind: 'waitFor',
          message: `m${i % 2}`,
          schema: MESSAGE_SCHEMA,
          ...(s.deadline === null ? {} : { timeout: s.deadline }),
          ...routeOnError,
          ...base,
        };
        return;
      case 'delay':
        steps[`s${i}`] = s.delay === 'until' ? { kind: 'delay', until: '"2025-01-01T00:20:00.000Z"', ...base } : { kind: 'delay', duration: s.delay, ...base };
        return;
      case 'async':
        steps[`s${i}`] = { kind: 'proxy', path: `/async${i}`, input: `{ "n": input.n, "step": ${i} }`, ...retry, ...compensate, ...routeOnError, ...base };
        return;
      case 'children':
        steps[`s${i}`] = {
          kind: 'children',
          logicId: CHILD_ID,
          items: `[${Array.from({ length: s.items }, (_, k) => k).join(',')}]`,
          itemInput: '{ "n": input.n, "item": item, "index": index }',
          failurePolicy: s.policy,
          ...routeOnError,
          ...base,
        };
        return;
    }
    steps[`s${i}`] = { kind: 'proxy', path: `/s${i}`, input: `{ "n": input.n, "step": ${i} }`, ...retry, ...compensate, ...routeOnError, ...base };
  });
  return makeLogic({ logicId: 'prop.wait', start: 's0', steps });
}

function childLogicOf(list: ChildKind[]): LogicVersion {
  const steps: Record<string, StepDef> = {};
  list.forEach((k, i) => {
    const base = i + 1 < list.length ? { next: `c${i + 1}` } : {};
    if (k === 'pass') steps[`c${i}`] = { kind: 'pass', input: `{ "item": input.item, "at": ${i} }`, ...base };
    else if (k === 'delay') steps[`c${i}`] = { kind: 'delay', duration: 'PT30S', ...base };
    else steps[`c${i}`] = { kind: 'proxy', path: `/c${i}`, input: '{ "item": input.item }', retry: { maxAttempts: 2, initialMs: 50 }, ...base };
  });
  return makeLogic({ logicId: CHILD_ID, start: 'c0', steps });
}

const outcomeOf = (o: O3, output: JsonValue): StepOutcome =>
  o === 'ok' ? { status: 'succeeded', output } : { status: 'failed', retryable: o === 'transient', error: { code: o, message: o } };

interface Live {
  logic: LogicVersion;
  child: LogicVersion;
  runner: TestRunner;
  flow: FlowHandle;
  calls: { key: string; step: string; kind: string }[];
  world: World;
}

/** Every handle of the tree: the root, then its children in spawn order. */
const treeOf = (h: FlowHandle): FlowHandle[] => [h, ...h.children.flatMap(treeOf)];
const snapshot = (h: FlowHandle) => structuredClone(treeOf(h).map((f) => ({ instance: f.instance, events: f.trace.entries.length, timers: f.timers })));

function waitingOn(h: FlowHandle): StepDef | undefined {
  const running = h.instance.ctx.running;
  return h.instance.state === 'waiting' && running !== null ? h.logic.steps[running.step] : undefined;
}

async function refused(h: FlowHandle, action: () => Promise<unknown>, code: string): Promise<void> {
  const before = snapshot(h);
  await expect(action()).rejects.toMatchObject({ code });
  expect(snapshot(h)).toEqual(before);
}

/** A repeat the runner must answer as the engine does (core `answerRepeatedCallback`): nothing changes either way. */
async function repeated(h: FlowHandle, action: () => Promise<unknown>, code: string | null): Promise<void> {
  if (code !== null) return refused(h, action, code);
  const before = snapshot(h);
  await action();
  expect(snapshot(h)).toEqual(before);
}

async function driveWaiting(list: WaitShape[], childList: ChildKind[], schedule: O3[], childSchedule: O3[], script: Act[], n: number): Promise<Live> {
  const logic = waitLogicOf(list);
  const child = childLogicOf(childList);
  const calls: Live['calls'] = [];
  const play = (sched: O3[]): Fake => {
    let i = 0;
    return (call) => {
      calls.push({ key: call.idempotencyKey, step: call.step, kind: call.kind });
      return outcomeOf(sched[i++] ?? 'ok', { from: call.step, attempt: call.attempt });
    };
  };
  const main = play(schedule);
  const kid = play(childSchedule);
  const fakeMap: Record<string, Fake> = {};
  for (const i of list.keys()) {
    fakeMap[`test/s${i}`] = main;
    fakeMap[`test/undo${i}`] = main;
    fakeMap[`test/async${i}`] = (call) => {
      calls.push({ key: call.idempotencyKey, step: call.step, kind: call.kind });
      return { status: 'parked' };
    };
  }
  for (const i of childList.keys()) fakeMap[`test/c${i}`] = kid;
  const world = new World(fakeMap);
  const runner = new TestRunner(logic, world.fakes, { logics: [child], maxBufferedMessages: 3 });
  const flow = await runner.start({ n });
  /** The completions the service delivered and the core applied, by attempt seq. */
  const applied = new Map<number, StepOutcome>();
  let completed: number | null = null;
  /** Keys of messages that were taken (delivered or buffered): a repeat answers as the first did. */
  const sent = new Set<string>();
  for (const act of script) {
    const step = waitingOn(flow);
    const running = flow.instance.ctx.running;
    if (act.t === 'advance') {
      await flow.advance(act.ms);
    } else if (act.t === 'resume') {
      if (step?.kind !== 'decision' || running === null) {
        await refused(flow, () => flow.resume({ step: 's0', option: 'approve', approver: { subject: 'ann', scopes: [SCOPE] } }), 'FLOW_NOT_AWAITING_DECISION');
      } else if (act.valid) {
        await flow.resume({ step: running.step, option: step.options[act.option]!, approver: { subject: 'ann', scopes: [SCOPE] } });
      } else if (act.bad === 'step') {
        await refused(flow, () => flow.resume({ step: 'nope', option: 'approve', approver: { subject: 'ann', scopes: [SCOPE] } }), 'FLOW_WRONG_STEP');
      } else if (act.bad === 'scope' && step.approverScope !== undefined) {
        await refused(flow, () => flow.resume({ step: running.step, option: 'approve', approver: { subject: 'bob', scopes: [] } }), 'FLOW_APPROVER_FORBIDDEN');
      } else {
        await refused(flow, () => flow.resume({ step: running.step, option: 'maybe', approver: { subject: 'ann', scopes: [SCOPE] } }), 'FLOW_BAD_OPTION');
      }
    } else if (act.t === 'complete') {
      if (step?.kind === 'proxy' && running !== null && flow.parkedSeq === running.seq) {
        completed = running.seq;
        const outcome = outcomeOf(act.o, { completed: running.step });
        await flow.complete(outcome);
        applied.set(running.seq, outcome);
      } else {
        // a token whose attempt is over: a repeat of the completion it took, another body, or stale
        const outcome = outcomeOf(act.o, null);
        const took = flow.parkedSeq === null ? undefined : applied.get(flow.parkedSeq);
        const code = took === undefined ? 'FLOW_STALE_TOKEN' : JSON.stringify(took) === JSON.stringify(outcome) ? null : 'FLOW_CALLBACK_ANSWERED_DIFFERENTLY';
        await repeated(flow, () => flow.complete(outcome), code);
      }
    } else if (act.t === 'send') {
      // m2 is a name no step takes; a refused message changes nothing, a repeated key neither
      const name = `m${act.message}`;
      const payload = act.valid ? { v: act.key } : { v: 'x' };
      const key = `${name}:${act.key}`;
      if (sent.has(key)) await repeated(flow, () => flow.send(name, payload, { key }), null);
      else {
        const before = snapshot(flow);
        const answer = await flow.send(name, payload, { key }).catch((err: { code: string }) => {
          expect(MESSAGE_REFUSALS).toContain(err.code);
          expect(snapshot(flow)).toEqual(before);
          return null;
        });
        if (answer !== null) sent.add(key);
      }
    } else if (completed !== null) {
      // the service's duplicate delivery of a completion that was already taken: the same body is
      // answered as the first delivery was, another body is refused
      const seq = completed;
      await repeated(flow, () => flow.complete(structuredClone(applied.get(seq)!), { seq }), null);
      await refused(flow, () => flow.complete(outcomeOf('ok', { again: true }), { seq }), 'FLOW_CALLBACK_ANSWERED_DIFFERENTLY');
    }
  }
  return { logic, child, runner, flow, calls, world };
}

/**
 * Walks a trace from its initial instance and checks what each wake-up meant, against the instance
 * it met: a timer, a callback or a fan-in for an attempt that is no longer parked changes nothing;
 * one for the parked attempt acts.
 */
async function checkWakeUps(logic: LogicVersion, trace: Trace): Promise<void> {
  let inst: Instance = trace.initial;
  for (const { event, decision } of trace.entries) {
    const running = inst.ctx.running;
    const parkedOn = (seq: number) => inst.state === 'waiting' && running?.seq === seq;
    const step = running === null ? undefined : logic.steps[running.step];
    if (event.type === 'timer') {
      expect(decision === null).toBe(!parkedOn(event.seq));
      if (decision !== null) expect(decision.cause).toBe(event.purpose === 'delay' ? 'resumed' : 'deadline_expired');
    }
    if (event.type === 'callback') expect(parkedOn(event.seq) && step?.kind === 'proxy').toBe(true);
    if (event.type === 'message') expect(parkedOn(running?.seq ?? -1) && step?.kind === 'waitFor' && step.message === event.args.name).toBe(true);
    if (event.type === 'resume') expect(parkedOn(running?.seq ?? -1) && step?.kind === 'decision' && running?.step === event.args.step).toBe(true);
    if (event.type === 'children') {
      const { open, failed, total, results } = event.state;
      expect(results === null).toBe(open > 0);
      if (results !== null) expect(results).toHaveLength(total);
      const failFast = step?.kind === 'children' && step.failurePolicy === 'fail_fast' && failed > 0;
      const acts = parkedOn(event.seq) && (failFast || open === 0);
      expect(decision !== null).toBe(acts);
      if (failFast && acts) expect(decision?.commands).toContainEqual({ type: 'cancelChildren' });
    }
    const t = await apply(logic, inst, event);
    if (t !== null) inst = t.instance;
  }
}

const waitingCase = fc.tuple(waitShapes, childShapes, outcomes, fc.array(fc.constantFrom<O3>('ok', 'transient', 'permanent'), { maxLength: 8 }), acts, fc.integer({ min: 0, max: 100 }));
const RESTING = ['waiting', 'completed', 'failed', 'compensated', 'cancelled', 'dead_lettered'];

describe('replay determinism with waiting, time and composition', () => {
  it('every instance rests, and its trace replays to the identical decisions and final record with zero calls', async () => {
    let withMessages = 0;
    await fc.assert(
      fc.asyncProperty(waitingCase, async ([list, childList, schedule, childSchedule, script, n]) => {
        const { logic, child, runner, flow, world } = await driveWaiting(list, childList, schedule, childSchedule, script, n);
        if (flow.trace.entries.some((e) => e.event.type === 'message')) withMessages++;
        for (const f of treeOf(flow)) {
          expect(RESTING).toContain(f.instance.state);
          let replayed: Instance | undefined;
          expectZeroCalls(await world.during(async () => (replayed = await realReplay(f === flow ? logic : child, f.trace, world))));
          await checkWakeUps(f === flow ? logic : child, f.trace);
          // a child that fail_fast cancelled was stopped by the store, not by an event of its own
          expect(f.cancelledByParent ? { ...replayed!, state: 'cancelled', error: f.instance.error } : replayed).toEqual(f.instance);
          // a timer that fell due never stays unfired; a parked delay or deadline has its timer armed
          for (const t of f.timers) expect(t.fireAtMs).toBeGreaterThan(runner.now);
          const parkedOn = waitingOn(f);
          if (parkedOn?.kind === 'delay' || (parkedOn?.kind === 'decision' && parkedOn.deadline !== undefined) || (parkedOn?.kind === 'waitFor' && parkedOn.timeout !== undefined)) {
            expect(f.timers.map((t) => t.seq)).toContain(f.instance.ctx.running!.seq);
          }
          // fan-in is over once the parent moved on: no child of an earlier fan-out is left open
          for (const c of f.children) {
            if (waitingOn(f)?.kind !== 'children' || f.instance.ctx.running?.seq !== c.instance.parentSeq) expect(RESTING.slice(1)).toContain(c.instance.state);
          }
        }
      }),
      { numRuns: 400 },
    );
    // the generators reach messages handed to waitFor steps in a fair share of the runs
    expect(withMessages).toBeGreaterThanOrEqual(20);
  });

  it('a replay that meets a changed event fails loudly', async () => {
    await fc.assert(
      fc.asyncProperty(waitingCase, fc.nat(), async ([list, childList, schedule, childSchedule, script, n], pick) => {
        const { logic, flow } = await driveWaiting(list, childList, schedule, childSchedule, script, n);
        const at = flow.trace.entries.findIndex((e, i) => i >= pick % flow.trace.entries.length && e.decision !== null);
        if (at < 0) return;
        const tampered = structuredClone(flow.trace);
        tampered.entries[at]!.decision!.state = 'nonsense';
        await expect(replay(logic, tampered)).rejects.toMatchObject({ code: 'FLOW_REPLAY_DIVERGED', details: { index: at } });
      }),
      { numRuns: 50 },
    );
  });

  it('no idempotency key serves two (step, generation) pairs, in the parent or any child', async () => {
    await fc.assert(
      fc.asyncProperty(waitingCase, async ([list, childList, schedule, childSchedule, script, n]) => {
        const { flow, calls } = await driveWaiting(list, childList, schedule, childSchedule, script, n);
        const owner = new Map<string, string>();
        for (const f of treeOf(flow))
          for (const e of f.trace.entries)
            for (const a of e.decision?.attempts ?? []) {
              if (a.op !== 'insert' || a.idempotencyKey === null) continue;
              const who = `${f.instance.id}:${a.kind}:${a.step}:${a.generation}`;
              expect(owner.get(a.idempotencyKey) ?? who).toBe(who);
              owner.set(a.idempotencyKey, who);
            }
        for (const c of calls) expect(owner.get(c.key)).toMatch(new RegExp(`:${c.kind}:${c.step}:0$`));
      }),
      { numRuns: 150 },
    );
  });
});
