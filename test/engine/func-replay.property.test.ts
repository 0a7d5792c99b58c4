import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LogicVersion, StepOutcome } from '../../contracts/index.ts';
import type { Instance, JsonValue } from '../../engine/core/instance.ts';
import { type Fake, type FlowHandle, replay, TestRunner, type Trace, type TraceEntry } from '../../engine/testing/index.ts';
import { createFuncRuntime, type FuncRuntime } from '../../host-functions/index.ts';
import { type BuiltTestModules, buildTestModules, TEST_MEMORY_PAGES } from '../host-functions/helpers/test-modules.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { expectZeroCalls, type Replayer, World } from './replay-tripwires.ts';

/**
 * A func step running the real `chain` module (its calls depend on earlier responses) under the
 * in-process runner, with crashes: after the k-th recorded host call the runner's memory is
 * dropped and a fresh runner picks the instance up from its committed trace.
 */

let modules: BuiltTestModules;
let runtime: FuncRuntime;

beforeAll(async () => {
  modules = await buildTestModules(['chain']);
  runtime = createFuncRuntime({ loadModule: modules.load, maxMemoryPages: TEST_MEMORY_PAGES });
}, 120_000);
afterAll(async () => {
  await runtime?.close();
  await modules?.cleanup();
});

const logic = (): LogicVersion =>
  makeLogic({
    logicId: 'prop.func',
    start: 'score',
    modules: { chain: { sha256: modules.hash['chain']!, imports: { step: { path: '/step' }, recover: { handler: 'risk', path: '/recover' } } } },
    steps: {
      score: { kind: 'func', module: 'chain', input: '{ "seed": input.seed }', retry: { maxAttempts: 4, initialMs: 100 }, next: 'after' },
      after: { kind: 'pass', input: '{ "count": $count(steps.score.responses) }' },
    },
  });

/** How the service answers call n: a response (`stop` ends the chain) or a refusal; `flaky` fails the first try (503). */
interface Answer {
  kind: 'ok' | 'error' | 'stop';
  flaky: boolean;
}
const answers = fc.array(fc.record({ kind: fc.constantFrom<Answer['kind']>('ok', 'ok', 'error', 'stop'), flaky: fc.boolean() }), {
  maxLength: 6,
});
/** Crash points: after this many recorded host calls (progress events) in all. */
const crashes = fc.uniqueArray(fc.integer({ min: 1, max: 7 }), { maxLength: 3 });

/** The owning service behind both imports; counts calls per idempotency key. */
function service(script: readonly Answer[]) {
  const hits = new Map<string, number>();
  const answered = new Map<string, number>();
  const fake: Fake = (call): StepOutcome => {
    const tries = (hits.get(call.idempotencyKey) ?? 0) + 1;
    hits.set(call.idempotencyKey, tries);
    const n = call.hostCall!.n;
    const a = script[n] ?? { kind: 'stop', flaky: false };
    if (a.flaky && tries === 1) return { status: 'failed', retryable: true, error: { code: 'HTTP_503', message: 'unavailable', status: 503 } };
    answered.set(call.idempotencyKey, (answered.get(call.idempotencyKey) ?? 0) + 1);
    if (a.kind === 'error') return { status: 'failed', retryable: false, error: { code: 'DECLINED', message: `call ${n} declined`, status: 422 } };
    return { status: 'succeeded', output: { stop: a.kind === 'stop', n, via: call.hostCall!.importName } };
  };
  return { fakes: { 'host:test/step': fake, 'host:risk/recover': fake }, hits, answered };
}

class Crash extends Error {}

/** Runs to rest, crashing after each of `crashAfter` progress events and restoring from the committed trace. */
async function runWithCrashes(script: readonly Answer[], crashAfter: readonly number[], id: string) {
  const l = logic();
  const svc = service(script);
  const pending = [...crashAfter].sort((a, b) => a - b);
  let committed: Trace | null = null;
  let restores = 0;
  const onEvent = (flow: FlowHandle, entry: TraceEntry) => {
    if (entry.event.type !== 'progress') return;
    const recorded = flow.trace.entries.filter((e) => e.event.type === 'progress').length;
    if (pending[0] !== recorded) return;
    pending.shift();
    committed = structuredClone(flow.trace);
    throw new Crash(`crash after ${recorded} recorded calls`);
  };
  // the runners and any replay of their trace share one world: the service's fakes and the module runtime
  const world = new World(svc.fakes, runtime);
  const runner = () => new TestRunner(l, world.fakes, { funcRuntime: world.funcRuntime!, onEvent });
  let flow: FlowHandle | null = null;
  try {
    flow = await runner().start({ seed: 7 }, { id });
  } catch (err) {
    if (!(err instanceof Crash)) throw err;
  }
  while (flow === null) {
    restores++;
    try {
      flow = await runner().restore(committed!);
    } catch (err) {
      if (!(err instanceof Crash)) throw err;
    }
  }
  return { logic: l, flow, svc, restores, world };
}

const realReplay: Replayer<LogicVersion, Trace> = (logic, trace) => replay(logic, trace);

/** A deliberately broken replay that runs the module again (and so its host calls): the check must catch it. */
const rerunning: Replayer<LogicVersion, Trace> = async (logic, trace, world) =>
  (await new TestRunner(logic, world.fakes, { funcRuntime: world.funcRuntime! }).run(trace.initial.input, { id: trace.initial.id })).instance;

let ids = 0;

describe('func steps under the test runner: crashes and replay', () => {
  it('a run that crashes after any recorded host call ends exactly like an uninterrupted one', async () => {
    await fc.assert(
      fc.asyncProperty(answers, crashes, async (script, crashAfter) => {
        const id = `00000000-0000-4000-8000-${String(++ids).padStart(12, '0')}`;
        const clean = await runWithCrashes(script, [], id);
        const crashed = await runWithCrashes(script, crashAfter, id);
        const progress = clean.flow.trace.entries.filter((e) => e.event.type === 'progress').length;
        expect(crashed.restores).toBe(crashAfter.filter((k) => k <= progress).length);

        expect(crashed.flow.instance).toEqual(clean.flow.instance);
        expect(crashed.flow.trace).toEqual(clean.flow.trace);
        // a recorded call is never made again, crash or not; only a transient failure repeats a key
        for (const [key, n] of crashed.svc.answered) expect(n, key).toBe(1);
        expect(crashed.svc.hits).toEqual(clean.svc.hits);

        const inst = clean.flow.instance;
        expect(['completed', 'dead_lettered']).toContain(inst.state);
        if (inst.state === 'completed') {
          const record = Object.values(inst.ctx.funcs ?? {}).at(-1);
          // the module's output is exactly the recorded responses, in call order
          expect(inst.ctx.outputs['score']).toEqual({ responses: record!.calls.map((c) => c.response) });
          expect(record!.calls.map((c) => c.n)).toEqual(record!.calls.map((_, i) => i));
        }
      }),
      { numRuns: 60 },
    );
  });

  it('a replay makes no module run and no host call', async () => {
    await fc.assert(
      fc.asyncProperty(answers, crashes, async (script, crashAfter) => {
        const id = `00000000-0000-4000-9000-${String(++ids).padStart(12, '0')}`;
        const { logic: l, flow, svc, world } = await runWithCrashes(script, crashAfter, id);
        const hits = structuredClone(svc.hits);
        let replayed: Instance | undefined;
        expectZeroCalls(await world.during(async () => (replayed = await realReplay(l, flow.trace, world))));
        expect(replayed).toEqual(flow.instance);
        expect(svc.hits).toEqual(hits);
      }),
      { numRuns: 25 },
    );
  });

  it('the zero-calls check fails for a replay that runs the module again (mutation check)', async () => {
    const { logic: l, flow, world } = await runWithCrashes([{ kind: 'ok', flaky: false }], [1], `00000000-0000-4000-a000-${String(++ids).padStart(12, '0')}`);
    expectZeroCalls(await world.during(() => realReplay(l, flow.trace, world)));
    const made = await world.during(() => rerunning(l, flow.trace, world));
    expect(made[0]).toMatch(/^module run /);
    expect(() => expectZeroCalls(made)).toThrow();
  });

  it('without a module runtime, a func:<module> fake replaces the whole step', async () => {
    const l = logic();
    const fake: Fake = (call) => ({ status: 'succeeded', output: { responses: [call.input as JsonValue] } });
    const { instance } = await new TestRunner(l, { 'func:chain': fake }).run({ seed: 1 });
    expect(instance.state).toBe('completed');
    expect(instance.output).toEqual({ count: 1 });
  });
});
