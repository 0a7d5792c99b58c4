import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { LogicVersion, StepDef, StepOutcome } from '../../contracts/index.ts';
import type { Fake } from '../../engine/testing/index.ts';
import { replay, TestRunner } from '../../engine/testing/index.ts';
import { makeLogic } from '../contracts/helpers.ts';

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

describe('replay determinism', () => {
  it('a live run replays to the identical decisions and final record with zero external calls', async () => {
    await fc.assert(
      fc.asyncProperty(shapes, outcomes, fc.integer({ min: 0, max: 100 }), async (list, schedule, n) => {
        const logic = logicOf(list);
        const { fake, calls } = scheduled(schedule);
        const live = await new TestRunner(logic, fakesFor(logic, fake)).run({ n });
        const callsBefore = calls.length;
        const replayed = await replay(logic, live.trace);
        expect(calls.length).toBe(callsBefore);
        expect(replayed).toEqual(live.instance);
        expect(['completed', 'failed', 'compensated', 'dead_lettered']).toContain(live.instance.state);
      }),
      { numRuns: 300 },
    );
  });

  it('compensations run in exact reverse order of registration', async () => {
    await fc.assert(
      fc.asyncProperty(shapes, outcomes, fc.integer({ min: 0, max: 100 }), async (list, schedule, n) => {
        const logic = logicOf(list);
        const { fake, calls } = scheduled(schedule);
        const { instance } = await new TestRunner(logic, fakesFor(logic, fake)).run({ n });
        const registered = instance.ctx.compensations.map((r) => r.step);
        const firstRuns = [...new Set(calls.filter((c) => c.kind === 'compensation').map((c) => c.step))];
        expect(firstRuns).toEqual([...registered].reverse().slice(0, firstRuns.length));
        if (instance.state === 'compensated') expect(firstRuns).toEqual([...registered].reverse());
      }),
      { numRuns: 300 },
    );
  });

  it('no idempotency key is ever used for two different (step, generation) pairs', async () => {
    await fc.assert(
      fc.asyncProperty(shapes, outcomes, fc.integer({ min: 0, max: 100 }), async (list, schedule, n) => {
        const logic = logicOf(list);
        const { fake, calls } = scheduled(schedule);
        const { trace } = await new TestRunner(logic, fakesFor(logic, fake)).run({ n });
        const owner = new Map<string, string>();
        for (const e of trace.entries)
          for (const a of e.decision.attempts) {
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
    tampered.entries[1]!.decision.runAfterMs = 1;
    await expect(replay(logic, tampered)).rejects.toMatchObject({ code: 'FLOW_REPLAY_DIVERGED' });
  });
});
