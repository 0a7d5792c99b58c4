import { type LogicVersion, statesAllowing, type TransitionCause } from '../../contracts/index.ts';
import { Refused } from './errors.ts';
import { enter, prepareNextCompensation, rewindTo, rewoundRegistrations } from './flow.ts';
import type { Instance, JsonValue } from './instance.ts';
import { schemaProblems } from './schemas.ts';
import { Draft, type Transition } from './transition.ts';

/**
 * Operator verbs (ARCHITECTURE.md, Invariants: one writer per instance) as pure decisions. Each refuses — changing nothing — when the
 * transition table does not let its cause leave the instance's state, or its arguments do not fit.
 */
function draftFor(logic: LogicVersion, inst: Instance, cause: TransitionCause): Draft {
  const allowed = statesAllowing(cause);
  if (!allowed.includes(inst.state)) {
    throw new Refused('FLOW_VERB_NOT_ALLOWED', `${cause} is not allowed on a ${inst.state} instance (allowed: ${allowed.join(', ')})`);
  }
  return new Draft(logic, inst, cause);
}

/** Closes the attempt left running or parked, so history shows it was overtaken by the verb. */
function supersedeRunning(d: Draft): void {
  const running = d.ctx.running;
  if (running !== null) d.finishAttempt(running, 'superseded', null, null);
  d.ctx.running = null;
}

function failedCompensation(inst: Instance): number {
  return inst.ctx.compensations.findIndex((r) => r.state === 'failed');
}

/** Re-runs what failed — the step, or the compensation that dead-lettered — with a fresh attempt budget. */
export async function retry(logic: LogicVersion, inst: Instance): Promise<Transition> {
  const d = draftFor(logic, inst, 'verb.retry');
  d.instance.error = null;
  const failed = failedCompensation(inst);
  if (failed >= 0) {
    d.ctx.compensations[failed]!.state = 'registered';
    await prepareNextCompensation(d);
    return d.done();
  }
  const step = inst.currentStep;
  if (step === null) throw new Refused('FLOW_NOTHING_TO_RETRY', `workflow ${inst.id} has no failed step`);
  await enter(d, step, { sameVisit: true });
  return d.done();
}

export interface RewindArgs {
  /** The step to run again; it and everything after it re-run under a new generation. */
  step: string;
  /**
   * Replacement input. At the start step it replaces the workflow input (checked against the
   * input schema); at any other step it replaces that step's evaluated input.
   */
  input?: JsonValue;
  /**
   * Undo first what the rewound steps did: their registered compensations run, last first, under
   * their own `:compensate` keys (with the outputs and input they were made with), before the
   * rewind. (Default: false — those effects stay in place; the preview lists them.)
   */
  compensateRewound?: boolean;
}

/**
 * `repair` and `replayFrom` (flow.ts, `rewindTo`). Compensations already registered stay
 * registered — their effects happened and may need undoing — unless `compensateRewound` runs
 * those of the rewound steps first.
 */
export async function rewind(logic: LogicVersion, inst: Instance, cause: 'verb.repair' | 'verb.replay_from', args: RewindArgs): Promise<Transition> {
  const d = draftFor(logic, inst, cause);
  if (logic.steps[args.step] === undefined) throw new Refused('FLOW_UNKNOWN_STEP', `${logic.logicId}@${logic.version} has no step ${args.step}`, 422);
  if (args.input !== undefined && args.step === logic.start) {
    const problems = schemaProblems(logic.input, args.input);
    if (problems.length > 0) throw new Refused('FLOW_INPUT_INVALID', `repair input breaks the input schema: ${problems.join('; ')}`, 422);
  }
  supersedeRunning(d);
  delete d.ctx.rewinding;
  const undo = args.compensateRewound === true ? rewoundRegistrations(d.instance, args.step) : [];
  if (undo.length === 0) {
    await rewindTo(d, args.step, args.input);
    return d.done();
  }
  // the rewound registrations may include one that failed (a dead-lettered compensation): each runs afresh
  for (const i of undo) d.ctx.compensations[i]!.state = 'registered';
  d.ctx.rewinding = { step: args.step, ...(args.input === undefined ? {} : { input: args.input }), undo };
  d.ctx.unwindTo = null;
  d.instance.error = null;
  await prepareNextCompensation(d);
  return d.done();
}

export interface CancelArgs {
  reason: string;
  /** Run registered compensations (last first) before ending as `cancelled`. (Default: false) */
  compensate?: boolean;
}

export async function cancel(logic: LogicVersion, inst: Instance, args: CancelArgs): Promise<Transition> {
  const d = draftFor(logic, inst, 'verb.cancel');
  supersedeRunning(d);
  // a cancel undoes everything registered, not only what a repair was rewinding
  delete d.ctx.rewinding;
  d.commands.push({ type: 'cancelChildren', compensate: args.compensate === true });
  d.instance.error = { code: 'CANCELLED', message: args.reason };
  const toUndo = d.ctx.compensations.some((r) => r.state !== 'succeeded');
  if (args.compensate === true && toUndo) {
    d.ctx.unwindTo = 'cancelled';
    await prepareNextCompensation(d);
    return d.done();
  }
  d.instance.state = 'cancelled';
  return d.done();
}

export interface ForceCompleteArgs {
  step: string;
  output: JsonValue;
}

/**
 * Marks the stuck step done with the given output and lets the flow go on. On an instance that
 * dead-lettered while compensating, it marks that compensation done and unwinding continues.
 */
export async function forceComplete(logic: LogicVersion, inst: Instance, args: ForceCompleteArgs): Promise<Transition> {
  const d = draftFor(logic, inst, 'verb.force_complete');
  const failed = failedCompensation(inst);
  if (failed >= 0) {
    const reg = d.ctx.compensations[failed]!;
    if (reg.step !== args.step) throw new Refused('FLOW_WRONG_STEP', `the failed compensation is ${reg.step}, not ${args.step}`);
    reg.state = 'succeeded';
    reg.error = null;
    d.instance.error = null;
    await prepareNextCompensation(d);
    return d.done();
  }
  if (inst.currentStep !== args.step) {
    throw new Refused('FLOW_WRONG_STEP', `workflow ${inst.id} is stuck at ${inst.currentStep}, not ${args.step}`);
  }
  const schema = logic.steps[args.step]?.output;
  const problems = schema === undefined ? [] : schemaProblems(schema, args.output);
  if (problems.length > 0) throw new Refused('FLOW_STEP_OUTPUT_INVALID', `output breaks the schema of ${args.step}: ${problems.join('; ')}`, 422);
  const running = d.ctx.running;
  if (running !== null) d.finishAttempt(running, 'succeeded', args.output, null);
  d.ctx.running = null;
  d.instance.error = null;
  d.setOutput(args.step, args.output);
  await enter(d, logic.steps[args.step]!.next ?? null);
  return d.done();
}

/**
 * The decision steps a verb would settle without an approver answering them: the step
 * force-complete marks done or repair rewinds to (with a new input, the question changes), and,
 * for a rewind to a step this instance has not reached, every decision not answered yet — the
 * jump may pass it. A rewind to a step already reached asks its decisions again, and needs
 * nothing more. The runtime requires the approver's scopes for each (Operations).
 */
export function decisionsSettledBy(logic: LogicVersion, inst: Instance, verb: 'force_complete' | 'repair' | 'replay_from', step: string): string[] {
  const isDecision = (s: string) => logic.steps[s]?.kind === 'decision';
  const settled = new Set<string>();
  if (verb !== 'replay_from' && isDecision(step)) settled.add(step);
  const reached = step === inst.currentStep || inst.ctx.order.includes(step);
  if (verb !== 'force_complete' && !reached) {
    for (const s of Object.keys(logic.steps)) if (isDecision(s) && !(s in inst.ctx.outputs)) settled.add(s);
  }
  return [...settled];
}
