import type { FlowErrorBody, LogicVersion, StepOutcome, TransitionCause } from '../../contracts/index.ts';
import { evaluate } from './expressions.ts';
import { type FuncRecord, funcKey, type Instance, type JsonValue, type Running } from './instance.ts';
import { backoffMs, keys, policyOf } from './retry.ts';
import { type Entered, isRegistrationOf, STEP_KINDS } from './steps.ts';
import { Draft, type Transition, visitField } from './transition.ts';
import { stepErrorOf } from './errors.ts';
import { validateOutput } from './schemas.ts';
import { holdOf } from './hold.ts';
import { MAX_WAIT_MS } from './storable.ts';
import { setAttributes, startMappings } from './attributes.ts';
import { armStepSla, armWorkflowSla } from './sla.ts';

/** Guards against a definition whose pure steps route in a circle. */
const MAX_STEPS_PER_TRANSITION = 1000;

/**
 * Enters `name` and keeps going through steps without side effects until one calls out, parks,
 * ends the workflow, or fails it.
 */
export interface EnterOptions {
  /** Replaces the first step's evaluated input (repair with input). */
  override?: { input: JsonValue };
  /** The first step is re-run in the visit it failed in (the retry verb): its key stays. */
  sameVisit?: boolean;
}

export async function enter(d: Draft, name: string | null, opts: EnterOptions = {}): Promise<void> {
  let current = name;
  let replacement = opts.override;
  let sameVisit = opts.sameVisit === true;
  for (let hops = 0; hops < MAX_STEPS_PER_TRANSITION; hops++) {
    if (current === null) return complete(d);
    const step = d.logic.steps[current];
    if (step === undefined) throw new Error(`step ${current} is not in ${d.logic.logicId}@${d.logic.version}`);
    d.instance.currentStep = current;
    armStepSla(d, current, step);
    d.enterVisit(current, sameVisit);
    sameVisit = false;
    let input: JsonValue = null;
    let entered: Entered;
    try {
      input = replacement !== undefined ? replacement.input : step.input === undefined ? d.instance.input : await evaluate('input', step.input, d.instance);
      replacement = undefined;
      entered = await (STEP_KINDS[step.kind] as (...a: unknown[]) => Promise<Entered>)(d, current, step, input);
    } catch (err) {
      // Every step kind evaluates before it changes anything, so the draft holds no half-entered
      // step: record the failure and route it like any permanent failure of the step.
      entered = failedEntry(d, current, input, stepErrorOf(err, current));
    }
    if ('fail' in entered) await failWorkflow(d, entered.fail, { exhausted: false });
    // the decision is visible to exactly one step: the one right after it
    d.ctx.decision = null;
    if (!('goto' in entered)) return;
    current = entered.goto ?? null;
  }
  await failWorkflow(d, { code: 'FLOW_LOOP', message: `more than ${MAX_STEPS_PER_TRANSITION} steps without a side effect` }, { exhausted: false });
}

/**
 * A step whose entry threw (its mapping failed): a failed attempt that never called out, then its
 * `onError` route, or the end of the workflow (compensating first) — never another try.
 */
function failedEntry(d: Draft, name: string, input: JsonValue, error: FlowErrorBody): Entered {
  d.insertAttempt({ step: name, attempt: d.nextAttempt(name), kind: 'step', state: 'failed', input, output: null, error, idempotencyKey: null });
  const onError = d.logic.steps[name]?.onError;
  if (onError === undefined) return { fail: error };
  d.setOutput(name, { error } as JsonValue);
  return { goto: onError };
}

async function complete(d: Draft): Promise<void> {
  const { logic, instance } = d;
  const last = instance.currentStep;
  if (logic.output !== undefined) {
    try {
      instance.output = await evaluate('output', logic.output, instance);
    } catch (err) {
      return failWorkflow(d, stepErrorOf(err, undefined, 'output'), { exhausted: false });
    }
  } else {
    instance.output = last === null ? null : (instance.ctx.outputs[last] ?? null);
  }
  instance.state = 'completed';
  instance.ctx.running = null;
  instance.error = null;
}

/**
 * Ends the forward path. A step that used up its attempts dead-letters the instance (the outcome
 * is unknown, so an operator decides); any other failure unwinds registered compensations, or
 * fails the instance when there is nothing to undo.
 */
export async function failWorkflow(d: Draft, error: FlowErrorBody, opts: { exhausted: boolean }): Promise<void> {
  const { instance } = d;
  instance.error = error;
  instance.ctx.running = null;
  if (opts.exhausted) {
    instance.state = 'dead_lettered';
    return;
  }
  if (pendingCompensations(instance).length > 0) {
    instance.ctx.unwindTo = 'compensated';
    instance.state = 'compensating';
    return prepareNextCompensation(d);
  }
  instance.state = 'failed';
}

/** Indexes of registrations still to run, last registered first (during a repair's undo: only those it rewinds). */
export function pendingCompensations(inst: Instance): number[] {
  const only = inst.ctx.rewinding?.undo;
  const out: number[] = [];
  for (let i = inst.ctx.compensations.length - 1; i >= 0; i--) {
    if (inst.ctx.compensations[i]?.state !== 'succeeded' && (only === undefined || only.includes(i))) out.push(i);
  }
  return out;
}

/**
 * The registrations whose effects a rewind to `step` leaves in place: not yet undone, and made by
 * a step that re-runs — any step but those that finished before `step` and keep their outputs.
 */
export function rewoundRegistrations(inst: Instance, step: string): number[] {
  const cut = inst.ctx.order.indexOf(step);
  const kept = new Set(cut < 0 ? inst.ctx.order : inst.ctx.order.slice(0, cut));
  const out: number[] = [];
  inst.ctx.compensations.forEach((r, i) => {
    if (r.state !== 'succeeded' && !kept.has(r.step)) out.push(i);
  });
  return out;
}

/**
 * `repair` / `replayFrom`: bump the generation (rotating the idempotency keys of everything that
 * re-runs), forget outputs from `step` on, and enter `step` again. Earlier history stays.
 * `input` replaces the workflow input at the start step (checked by the verb), else the step's own.
 */
export async function rewindTo(d: Draft, step: string, input: JsonValue | undefined): Promise<void> {
  const replaceWorkflowInput = input !== undefined && step === d.logic.start;
  if (replaceWorkflowInput) d.instance.input = input;
  const cut = d.ctx.order.indexOf(step);
  for (const s of cut < 0 ? [] : d.ctx.order.slice(cut)) d.forgetOutput(s);
  d.ctx.attempts = {};
  delete d.ctx.visits;
  delete d.ctx.rewinding;
  d.ctx.decision = null;
  d.ctx.unwindTo = null;
  d.instance.generation += 1;
  d.instance.error = null;
  d.instance.output = null;
  // the start's attributes follow a replaced workflow input; the others keep their last value
  if (replaceWorkflowInput && d.logic.attributes !== undefined) {
    try {
      await setAttributes(d, startMappings(d.logic.attributes));
    } catch (err) {
      return failWorkflow(d, stepErrorOf(err, undefined), { exhausted: false });
    }
  }
  const override = input !== undefined && !replaceWorkflowInput ? { input } : undefined;
  await enter(d, step, override === undefined ? {} : { override });
}

/** Prepares the next compensation attempt, or ends the unwinding when none is left. */
export async function prepareNextCompensation(d: Draft): Promise<void> {
  const { instance } = d;
  const next = pendingCompensations(instance)[0];
  const rewinding = instance.ctx.rewinding;
  if (next === undefined && rewinding !== undefined) {
    // the effects the repair rewinds are undone: now it rewinds, and the flow runs on from there
    instance.ctx.running = null;
    return rewindTo(d, rewinding.step, rewinding.input);
  }
  if (next === undefined) {
    instance.state = instance.ctx.unwindTo ?? 'compensated';
    instance.ctx.running = null;
    return;
  }
  const reg = instance.ctx.compensations[next]!;
  const action = d.logic.steps[reg.step]?.compensate;
  const idempotencyKey = keys.compensation(instance.id, reg.step, reg.generation, reg.visit);
  let input: JsonValue;
  try {
    // evaluated now, not at registration: the step's own output is known by the time it is undone
    input = action?.input === undefined ? reg.stepInput : await evaluate('compensate.input', action.input, instance);
  } catch (err) {
    return compensationUnprepared(d, next, stepErrorOf(err, reg.step, 'compensate.input'), idempotencyKey);
  }
  reg.state = 'running';
  reg.attempts += 1;
  const seq = d.insertAttempt({
    step: reg.step,
    attempt: reg.attempts,
    kind: 'compensation',
    state: 'running',
    input,
    output: null,
    error: null,
    idempotencyKey,
  });
  instance.ctx.running = {
    seq,
    kind: 'compensation',
    step: reg.step,
    attempt: reg.attempts,
    generation: reg.generation,
    input,
    idempotencyKey,
    budgetStart: reg.attempts,
    registration: next,
    ...visitField(reg.visit ?? 1),
  };
  instance.state = 'compensating';
}

/**
 * A compensation whose input cannot be evaluated cannot run, now or on a retry: recorded as a
 * failed attempt, and the instance dead-letters as for a compensation out of attempts, so an
 * operator settles it (force-complete, or a repair of the definition's data).
 */
function compensationUnprepared(d: Draft, index: number, error: FlowErrorBody, idempotencyKey: string): void {
  const reg = d.ctx.compensations[index]!;
  reg.attempts += 1;
  d.insertAttempt({ step: reg.step, attempt: reg.attempts, kind: 'compensation', state: 'failed', input: null, output: null, error, idempotencyKey });
  reg.state = 'failed';
  reg.error = error;
  d.ctx.running = null;
  d.instance.state = 'dead_lettered';
  d.instance.error = { code: 'FLOW_COMPENSATION_FAILED', message: `compensation of ${reg.step} cannot run: ${error.message}`, step: reg.step };
}

/**
 * A failure that leaves nothing to undo: permanent, and not marked as having taken effect. A
 * transient failure's outcome is unknown and a 2xx the engine could not store took effect: both
 * keep the step's compensation (ARCHITECTURE.md, Compensation).
 */
export function tookNoEffect(outcome: StepOutcome): boolean {
  return outcome.status === 'failed' && !outcome.retryable && outcome.effect !== 'taken';
}

/** The core's reaction to the result of the running attempt (a step or a compensation). */
export async function onOutcome(logic: LogicVersion, inst: Instance, outcome: StepOutcome, goOn = false): Promise<Transition> {
  const running = inst.ctx.running;
  if (running === null) throw new Error(`workflow ${inst.id} has no running attempt to report on`);
  if (running.kind === 'compensation') return onCompensationOutcome(logic, inst, outcome, goOn);
  const step = logic.steps[running.step]!;
  const d = new Draft(logic, inst, 'step_succeeded', goOn);
  let checked = outcome.status === 'succeeded' ? validateOutput(step.output, outcome.output, running.step) : outcome;
  if (checked.status === 'succeeded' && 'attributes' in step && step.attributes !== undefined) {
    try {
      await setAttributes(d, step.attributes, { output: checked.output });
    } catch (err) {
      // the call took effect; only its attributes cannot be stored: the step fails, its compensation stays
      checked = { status: 'failed', retryable: false, effect: 'taken', error: stepErrorOf(err, running.step) };
    }
  }

  if (checked.status === 'succeeded') {
    d.finishAttempt(running, 'succeeded', checked.output, null);
    d.ctx.running = null;
    d.setOutput(running.step, checked.output);
    await enter(d, step.next ?? null);
    d.cause = causeAfterEnter(d);
    return d.done();
  }
  if (checked.status === 'parked') {
    d.finishAttempt(running, 'parked', null, null);
    d.instance.state = 'waiting';
    d.cause = 'parked';
    // the step's timeoutMs bounds the wait for its callback too (a timer on the database clock);
    // without one it waits as long as it takes, like a decision without a deadline
    if (step.timeoutMs !== undefined) d.commands.push({ type: 'timer', purpose: 'callback', delayMs: step.timeoutMs, at: null, seq: running.seq });
    return d.done();
  }

  const hold = holdOf(step, running, checked);
  if (hold !== null) {
    // the same attempt again, its number unchanged: a hold uses none of the retry budget
    d.finishAttempt(running, 'failed', null, hold.error);
    const seq = d.insertAttempt({
      step: running.step,
      attempt: running.attempt,
      kind: 'step',
      state: 'running',
      input: running.input,
      output: null,
      error: null,
      idempotencyKey: running.idempotencyKey,
    });
    d.ctx.running = { ...running, ...hold.running, seq };
    d.instance.state = 'pending';
    d.runAfterMs = hold.waitMs;
    d.cause = 'retry_scheduled';
    return d.done();
  }
  const error = { ...checked.error, step: running.step };
  d.finishAttempt(running, 'failed', null, error);
  const policy = policyOf(step.retry);
  if (checked.retryable && running.attempt - running.budgetStart + 1 < policy.maxAttempts) {
    const wait = backoffMs(step.retry, running.attempt, `${running.idempotencyKey}:${running.attempt}`);
    const attempt = running.attempt + 1;
    const seq = d.insertAttempt({
      step: running.step,
      attempt,
      kind: 'step',
      state: 'running',
      input: running.input,
      output: null,
      error: null,
      idempotencyKey: running.idempotencyKey,
    });
    d.ctx.running = { ...running, seq, attempt };
    d.instance.state = 'pending';
    d.runAfterMs = Math.min(MAX_WAIT_MS, Math.max(wait, checked.retryAfterMs ?? 0));
    d.cause = 'retry_scheduled';
    return d.done();
  }
  d.ctx.running = null;
  if (tookNoEffect(checked)) {
    // A permanent refusal means the call took no effect: there is nothing of it to undo.
    d.ctx.compensations = d.ctx.compensations.filter((r) => !isRegistrationOf(r, running.step, running.generation, running.visit ?? 1));
  }
  if (step.onError !== undefined) {
    d.setOutput(running.step, { error } as JsonValue);
    await enter(d, step.onError);
    d.cause = causeAfterEnter(d);
    return d.done();
  }
  d.cause = 'step_failed';
  const exhausted = checked.retryable;
  await failWorkflow(d, exhausted ? { ...error, message: `${error.message} (gave up after ${running.attempt} attempts)` } : error, {
    exhausted,
  });
  return d.done();
}

async function onCompensationOutcome(logic: LogicVersion, inst: Instance, outcome: StepOutcome, goOn: boolean): Promise<Transition> {
  const running = inst.ctx.running!;
  const d = new Draft(logic, inst, 'compensation_succeeded', goOn);
  const reg = d.ctx.compensations[running.registration!]!;
  if (outcome.status === 'succeeded' || outcome.status === 'parked') {
    // a compensation has no callback protocol: accepted (202) counts as done
    const output = outcome.status === 'succeeded' ? outcome.output : null;
    d.finishAttempt(running, 'succeeded', output, null);
    reg.state = 'succeeded';
    reg.error = null;
    await prepareNextCompensation(d);
    if (d.instance.state === 'dead_lettered') d.cause = 'compensation_exhausted';
    return d.done();
  }
  const error = { ...outcome.error, step: running.step };
  d.finishAttempt(running, 'failed', null, error);
  reg.error = error;
  const action = logic.steps[running.step]?.compensate;
  if (outcome.retryable && running.attempt - running.budgetStart + 1 < policyOf(action?.retry).maxAttempts) {
    reg.attempts += 1;
    const seq = d.insertAttempt({
      step: running.step,
      attempt: reg.attempts,
      kind: 'compensation',
      state: 'running',
      input: running.input,
      output: null,
      error: null,
      idempotencyKey: running.idempotencyKey,
    });
    d.ctx.running = { ...running, seq, attempt: reg.attempts };
    d.runAfterMs = Math.min(MAX_WAIT_MS, Math.max(backoffMs(action?.retry, running.attempt, `${running.idempotencyKey}:${running.attempt}`), outcome.retryAfterMs ?? 0));
    d.cause = 'compensation_retry_scheduled';
    return d.done();
  }
  // Never swallowed: an operator must see and settle a compensation that could not run.
  reg.state = 'failed';
  d.ctx.running = null;
  d.instance.state = 'dead_lettered';
  d.instance.error = { code: 'FLOW_COMPENSATION_FAILED', message: `compensation of ${running.step} failed: ${error.message}`, step: running.step };
  d.cause = 'compensation_exhausted';
  return d.done();
}

/**
 * A func step made a host call whose result must be durable before the module runs again: the
 * record grows, the attempt stays running, and the same worker goes on (host-functions/README.md, record and replay).
 */
export function onProgress(logic: LogicVersion, inst: Instance, record: FuncRecord, goOn = false): Transition {
  const d = new Draft(logic, inst, 'step_progressed', goOn);
  d.ctx.funcs = { ...d.ctx.funcs, [funcKey(inst.ctx.running!)]: record };
  return d.done();
}

/** The cause that names where `enter` led from a running step. */
function causeAfterEnter(d: Draft): TransitionCause {
  const s = d.instance.state;
  if (s === 'waiting') return 'parked';
  if (s === 'failed' || s === 'compensating' || s === 'dead_lettered') return 'step_failed';
  return 'step_succeeded';
}

/** Builds the first transition of a new instance: enters `start` and runs to the first effect. */
export async function begin(logic: LogicVersion, inst: Instance): Promise<Transition> {
  // a new instance waits for a worker (pending); the first effect is already prepared
  const d = new Draft(logic, inst, 'claim');
  await start(d);
  return d.done();
}

/**
 * Arms the instance's SLA, sets its search attributes (a mapping that fails fails the instance
 * before its first step), and enters the start step.
 */
async function start(d: Draft): Promise<void> {
  armWorkflowSla(d);
  const attributes = d.logic.attributes;
  if (attributes !== undefined) {
    try {
      await setAttributes(d, startMappings(attributes));
    } catch (err) {
      return failWorkflow(d, stepErrorOf(err, undefined), { exhausted: false });
    }
  }
  await enter(d, d.logic.start);
}

/** A spawned child has nothing prepared yet: the worker that claimed it begins it. */
export function isUnstarted(inst: Instance): boolean {
  return inst.ctx.seq === 0 && inst.ctx.running === null;
}

/** The first transition of a claimed, unstarted child; the claiming worker may go straight on. */
export async function beginClaimed(logic: LogicVersion, inst: Instance, goOn = false): Promise<Transition> {
  const d = new Draft(logic, inst, 'step_succeeded', goOn);
  await start(d);
  d.cause = causeAfterEnter(d);
  return d.done();
}

/** Per-attempt timeout when a step (or a compensation action) sets none. */
export const DEFAULT_TIMEOUT_MS = 30_000;

/**
 * How long one attempt may take: a step's `timeoutMs`, or a compensation action's own — never
 * the forward step's for its compensation. For a step answered 202 it also bounds the wait for
 * the callback (FLOW_CALLBACK_TIMEOUT), when the step sets it.
 */
export function attemptTimeoutMs(logic: LogicVersion, running: Pick<Running, 'kind' | 'step'>): number {
  const step = logic.steps[running.step];
  const def = running.kind === 'step' ? step : step?.compensate;
  return def?.timeoutMs ?? DEFAULT_TIMEOUT_MS;
}
