import type { FlowErrorBody, StepDef, StepKind, StepOfKind } from '../../contracts/index.ts';
import { enterChildren, enterDecision, enterDelay, enterWaitFor } from './park.ts';
import { evaluate } from './expressions.ts';
import type { JsonValue, Registration } from './instance.ts';
import { keys } from './retry.ts';
import { type Draft, visitField } from './transition.ts';

/**
 * How the core enters a step: it moves on at once (`goto`), stops (an effect, a park, an end), or
 * fails the workflow (`fail`). Failing is left to flow.ts, which owns the unwinding, so this table
 * needs nothing from it and the two files do not import each other.
 */
export type Entered = { goto: string | null } | { stop: true } | { fail: FlowErrorBody };
type Enter<K extends StepKind> = (d: Draft, name: string, step: StepOfKind<K>, input: JsonValue) => Promise<Entered>;

const STOP = { stop: true } as const;

/**
 * One entry per step kind; adding a kind to the contract does not compile until it is handled here.
 * Steps without side effects (pass, choice, emit, fail) complete inside the transition that reaches
 * them, so a run of them costs no extra commit.
 */
export const STEP_KINDS: { [K in StepKind]: Enter<K> } = {
  pass: async (d, name, step, input) => pure(d, name, input, step.next ?? null),

  choice: async (d, name, step) => {
    for (const [i, branch] of step.branches.entries()) {
      if ((await evaluate(`branches[${i}].when`, branch.when, d.instance)) === true) return pure(d, name, { next: branch.next }, branch.next);
    }
    return pure(d, name, { next: step.otherwise }, step.otherwise);
  },

  emit: async (d, name, step, input) => {
    const payload = await evaluate('payload', step.payload, d.instance);
    const key = keys.step(d.instance.id, name, d.instance.generation, d.visitOf(name));
    d.commands.push({ type: 'outbox', kind: 'event', topic: step.event, payload, idempotencyKey: key });
    void input;
    return pure(d, name, payload, step.next ?? null);
  },

  fail: async (d, name, step, input) =>
    failStepAt(d, name, input, { code: step.code, message: step.message ?? `step ${name} failed the workflow`, step: name }),

  proxy: async (d, name, step, input) => prepareEffect(d, name, step, input),
  http: async (d, name, step, input) => prepareEffect(d, name, step, input),
  func: async (d, name, step, input) => prepareEffect(d, name, step, input),

  decision: async (d, name, step, input) => {
    await enterDecision(d, name, step, input);
    return STOP;
  },
  waitFor: async (d, name, step, input) => {
    enterWaitFor(d, name, step, input);
    return STOP;
  },
  delay: async (d, name, step, input) => {
    const problem = await enterDelay(d, name, step, input);
    return problem === null ? STOP : failStepAt(d, name, input, { code: 'FLOW_BAD_UNTIL', message: problem, step: name });
  },
  children: async (d, name, step, input) => {
    const parked = await enterChildren(d, name, step, input);
    if (parked === false) return pure(d, name, [], step.next ?? null);
    return parked === true ? STOP : failStepAt(d, name, input, { ...parked, step: name });
  },
};

/** Records a failed attempt that never called out; the caller then fails the workflow (compensating first). */
function failStepAt(d: Draft, name: string, input: JsonValue, error: FlowErrorBody): Entered {
  d.insertAttempt({ step: name, attempt: d.nextAttempt(name), kind: 'step', state: 'failed', input, output: null, error, idempotencyKey: null });
  return { fail: error };
}

function pure(d: Draft, name: string, output: JsonValue, next: string | null): Entered {
  const input = output;
  d.insertAttempt({ step: name, attempt: d.nextAttempt(name), kind: 'step', state: 'succeeded', input, output, error: null, idempotencyKey: null });
  d.setOutput(name, output);
  return { goto: next };
}

/**
 * Prepares the first attempt of a step that calls out: registers its compensation (before it can
 * possibly run: ARCHITECTURE.md, Invariants: state before effect) and writes the attempt row, all in this transition's commit.
 */
function prepareEffect(d: Draft, name: string, step: StepDef, input: JsonValue): Entered {
  const { generation } = d.instance;
  const visit = d.visitOf(name);
  // once per visit: a retry verb re-entering the same visit finds its registration already there
  if (step.compensate && !d.ctx.compensations.some((r) => isRegistrationOf(r, name, generation, visit))) {
    d.ctx.compensations.push({ step: name, generation, ...visitField(visit), stepInput: input, state: 'registered', attempts: 0, error: null });
  }
  d.startAttempt(name, input, 'running');
  d.instance.state = 'processing';
  return STOP;
}

/** Whether `r` is the registration of that visit of `step` in `generation`. */
export function isRegistrationOf(r: Registration, step: string, generation: number, visit: number): boolean {
  return r.step === step && r.generation === generation && (r.visit ?? 1) === visit;
}
