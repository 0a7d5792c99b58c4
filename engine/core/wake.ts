import type { FlowErrorBody, LogicVersion, StepOutcome } from '../../contracts/index.ts';
import { Refused } from './errors.ts';
import { enter, failWorkflow, onOutcome } from './flow.ts';
import type { Approver, Instance, JsonValue, TimerPurpose } from './instance.ts';
import { schemaProblems } from './schemas.ts';
import { Draft, type Transition } from './transition.ts';

export interface ResumeArgs {
  step: string;
  option: string;
  payload?: JsonValue;
  approver: Approver;
}

/** Ends a parked attempt with `output` and runs on; a wake-up leaves new work to any worker. */
async function runOn(d: Draft, output: JsonValue, next: string | null): Promise<Transition> {
  const running = d.ctx.running!;
  d.finishAttempt(running, 'succeeded', output, null);
  d.setOutput(running.step, output);
  d.ctx.running = null;
  await enter(d, next);
  return d.done();
}

/**
 * Refuses unless `approver` holds the decision step's `approverScope` (where it declares one). The
 * one check for everything that settles a decision: an answer, and an operator verb that would
 * settle it instead (Operations). `flow:decide` for the definition is checked before, with the
 * other scopes.
 */
export function refuseUnlessApprover(approver: { subject: string; scopes: readonly string[] }, stepName: string, step: { approverScope?: string | undefined }): void {
  if (step.approverScope !== undefined && !approver.scopes.includes(step.approverScope)) {
    throw new Refused('FLOW_APPROVER_FORBIDDEN', `${approver.subject} lacks scope ${step.approverScope} to decide ${stepName}`, 403);
  }
}

/**
 * An approver answers a decision. Refused, changing nothing, when the instance is not parked on
 * that decision (wrong step, already answered), the option is not offered, the payload breaks the
 * decision's schema, or the approver lacks `approverScope` — checked now, at execution time.
 */
export async function onResume(logic: LogicVersion, inst: Instance, args: ResumeArgs): Promise<Transition> {
  const running = inst.ctx.running;
  const step = running === null ? undefined : logic.steps[running.step];
  if (inst.state !== 'waiting' || running === null || step?.kind !== 'decision') {
    throw new Refused('FLOW_NOT_AWAITING_DECISION', `workflow ${inst.id} is ${inst.state} and not parked on a decision`);
  }
  if (running.step !== args.step) {
    throw new Refused('FLOW_WRONG_STEP', `workflow ${inst.id} awaits a decision on ${running.step}, not ${args.step}`);
  }
  if (!step.options.includes(args.option)) {
    throw new Refused('FLOW_BAD_OPTION', `option "${args.option}" is not one of ${step.options.join(', ')}`, 422);
  }
  // no payload given: an empty object where the decision declares a schema (one whose fields are
  // all optional accepts it; otherwise the problems name the missing fields), else null
  const payload = args.payload ?? (step.schema === undefined ? null : {});
  const problems = step.schema === undefined ? [] : schemaProblems(step.schema, payload);
  if (problems.length > 0) {
    throw new Refused('FLOW_DECISION_PAYLOAD_INVALID', `decision payload breaks the schema of ${args.step}: ${problems.join('; ')}`, 422);
  }
  refuseUnlessApprover(args.approver, args.step, step);
  const d = new Draft(logic, inst, 'verb.resume');
  const decision = { option: args.option, payload, approvedBy: args.approver.subject };
  d.ctx.decision = decision;
  d.ctx.approvedBy = args.approver;
  return runOn(d, decision, step.next ?? null);
}

export interface MessageArgs {
  name: string;
  payload: JsonValue;
}

/**
 * A message is handed to the instance parked on a waitFor step of that name; its payload is the
 * step's output. Refused, changing nothing, when the instance is not parked on that message. The
 * payload was checked against the step's schema at delivery; it is checked again here, so a trace
 * replays the same refusal.
 */
export async function onMessage(logic: LogicVersion, inst: Instance, args: MessageArgs): Promise<Transition> {
  const running = inst.ctx.running;
  const step = running === null ? undefined : logic.steps[running.step];
  if (inst.state !== 'waiting' || running === null || step?.kind !== 'waitFor' || step.message !== args.name) {
    throw new Refused('FLOW_NOT_AWAITING_MESSAGE', `workflow ${inst.id} is ${inst.state} and not parked on message ${args.name}`);
  }
  const refusal = messageRefusal(logic, args.name, args.payload);
  if (refusal !== null) throw refusal;
  return runOn(new Draft(logic, inst, 'resumed'), args.payload, step.next ?? null);
}

/**
 * Why `payload` cannot be message `name` of this version, or null: some waitFor step must take the
 * name (FLOW_UNKNOWN_MESSAGE), and the payload must fit the schema of every step that does
 * (FLOW_MESSAGE_PAYLOAD_INVALID). The one check for delivery and for the core.
 */
export function messageRefusal(logic: LogicVersion, name: string, payload: JsonValue): Refused | null {
  const waits = Object.values(logic.steps).flatMap((s) => (s.kind === 'waitFor' && s.message === name ? [s] : []));
  if (waits.length === 0) {
    return new Refused('FLOW_UNKNOWN_MESSAGE', `no waitFor step of ${logic.logicId}@${logic.version} takes message ${name}`, 422);
  }
  const problems = waits.flatMap((s) => (s.schema === undefined ? [] : schemaProblems(s.schema, payload)));
  if (problems.length === 0) return null;
  return new Refused('FLOW_MESSAGE_PAYLOAD_INVALID', `message ${name} breaks the schema of its waitFor step: ${problems.join('; ')}`, 422);
}

/**
 * A timer fired. Returns null when it is stale: the attempt it was set for is already over
 * (answered before its deadline, cancelled, rewound), so firing it must change nothing.
 */
export async function onTimer(
  logic: LogicVersion,
  inst: Instance,
  timer: { purpose: TimerPurpose | 'children'; seq: number },
  goOn = false,
): Promise<Transition | null> {
  const running = inst.ctx.running;
  if (inst.state !== 'waiting' || running === null || running.seq !== timer.seq) return null;
  const step = logic.steps[running.step]!;
  if (timer.purpose === 'delay') return runOn(new Draft(logic, inst, 'resumed', goOn), running.input, step.next ?? null);
  if (timer.purpose === 'callback') {
    // no completion in time: the outcome is unknown, so a retryable failure under the step's policy
    const error = { code: 'FLOW_CALLBACK_TIMEOUT', message: `no completion of ${running.step} within its timeoutMs (${step.timeoutMs} ms)` };
    return answerParked(logic, inst, { status: 'failed', retryable: true, error }, goOn);
  }

  if (step.kind === 'waitFor') {
    // no message in time: a step error, taking the step's error path as any other failure does
    const error = { code: 'FLOW_MESSAGE_TIMEOUT', message: `no message ${step.message} for ${running.step} within ${step.timeout}`, step: running.step };
    return failParked(new Draft(logic, inst, 'deadline_expired', goOn), error, step.onError);
  }
  const d = new Draft(logic, inst, 'deadline_expired', goOn);
  const error = { code: 'DEADLINE_EXCEEDED', message: `no decision on ${running.step} before its deadline`, step: running.step };
  d.finishAttempt(running, 'failed', null, error);
  d.ctx.running = null;
  if (step.kind === 'decision' && step.onTimeout !== undefined) {
    d.setOutput(running.step, { error });
    await enter(d, step.onTimeout);
    return d.done();
  }
  await failWorkflow(d, error, { exhausted: false });
  return d.done();
}

/** Ends the parked attempt as failed and goes to `route` (the step's error path), else fails the workflow. */
async function failParked(d: Draft, error: FlowErrorBody, route: string | undefined): Promise<Transition> {
  const running = d.ctx.running!;
  d.finishAttempt(running, 'failed', null, error);
  d.ctx.running = null;
  if (route !== undefined) {
    d.setOutput(running.step, { error });
    await enter(d, route);
    return d.done();
  }
  await failWorkflow(d, error, { exhausted: false });
  return d.done();
}

export interface ChildrenState {
  total: number;
  open: number;
  failed: number;
  /** Each child's ending in item order; loaded only once none is open. */
  results: { state: string; output: JsonValue; error: JsonValue }[] | null;
  /** The spawn was refused (no grant, no active version) and no child started: the step fails with this. */
  refused?: FlowErrorBody;
}

/**
 * Fan-in. Runs on once every child has ended: with `fail_fast` the output is the children's
 * outputs in item order, with `all_settled` each child's `{state, output, error}`. With
 * `fail_fast`, the first failed child fails the step and cancels the rest. Returns null while
 * there is nothing to do yet, or when the signal is stale.
 */
export async function onChildren(
  logic: LogicVersion,
  inst: Instance,
  seq: number,
  children: ChildrenState,
  goOn = false,
): Promise<Transition | null> {
  const running = inst.ctx.running;
  const step = running === null ? undefined : logic.steps[running.step];
  if (inst.state !== 'waiting' || running?.seq !== seq || step?.kind !== 'children') return null;
  const refused = children.refused === undefined ? null : { ...children.refused, step: running.step };
  if (refused !== null || (step.failurePolicy === 'fail_fast' && children.failed > 0)) {
    const d = new Draft(logic, inst, 'resumed', goOn);
    const error = refused ?? { code: 'CHILD_FAILED', message: `${children.failed} of ${children.total} children did not complete`, step: running.step };
    d.finishAttempt(running, 'failed', null, error);
    d.ctx.running = null;
    d.commands.push({ type: 'cancelChildren' });
    if (step.onError !== undefined) {
      d.setOutput(running.step, { error });
      await enter(d, step.onError);
      return d.done();
    }
    await failWorkflow(d, error, { exhausted: false });
    return d.done();
  }
  if (children.open > 0 || children.results === null) return null;
  const output =
    step.failurePolicy === 'fail_fast'
      ? children.results.map((r) => r.output)
      : children.results.map((r) => ({ state: r.state, output: r.output, error: r.error }));
  return runOn(new Draft(logic, inst, 'resumed', goOn), output as JsonValue, step.next ?? null);
}

/**
 * The owning service completes a step it had answered with 202 waiting. `seq` comes from the
 * resume token; a token for an attempt that is over (a duplicate or stale completion) is refused.
 */
export async function onCallback(logic: LogicVersion, inst: Instance, seq: number, outcome: StepOutcome): Promise<Transition> {
  const running = inst.ctx.running;
  const kind = running === null ? undefined : logic.steps[running.step]?.kind;
  const callsOut = running?.seq === seq && running.kind === 'step' && (kind === 'proxy' || kind === 'http');
  if (inst.state === 'processing' && callsOut) {
    // the attempt is still out or its 202 answer not yet committed: the completion came early
    throw new Refused('FLOW_NOT_YET_WAITING', `workflow ${inst.id} has not yet recorded that this attempt waits (its 202 answer is not committed); send the completion again`);
  }
  if (inst.state !== 'waiting' || !callsOut) {
    throw new Refused('FLOW_STALE_TOKEN', `workflow ${inst.id} is no longer waiting for this completion`);
  }
  if (outcome.status === 'parked') throw new Refused('FLOW_BAD_COMPLETION', 'a completion must carry an output or an error', 422);
  return answerParked(logic, inst, outcome);
}

/** The parked attempt's outcome arrived (a completion) or will not (its timeout): the core decides as for any outcome. */
async function answerParked(logic: LogicVersion, inst: Instance, outcome: StepOutcome, goOn = false): Promise<Transition> {
  const t = await onOutcome(logic, inst, outcome, goOn);
  return { ...t, cause: 'resumed' };
}
