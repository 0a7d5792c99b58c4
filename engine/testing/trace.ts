import { canonicalJson, FlowError, type LogicVersion, type StepOutcome } from '../../contracts/index.ts';
import { begin, beginClaimed, onOutcome, onProgress } from '../core/flow.ts';
import type { FuncRecord, Instance, TimerPurpose } from '../core/instance.ts';
import type { Transition } from '../core/transition.ts';
import { type ChildrenState, onCallback, onChildren, onResume, onTimer, type ResumeArgs } from '../core/wake.ts';

/**
 * One input to the core. Each carries everything the core needs, so a replay calls nothing:
 * - `begin`: the first transition (`claimed`: a spawned child, begun by the worker that claimed it);
 * - `outcome`: the result of the prepared attempt (a fake's answer, or a func step's end);
 * - `progress`: a func step's host call was answered; `record` is the grown record;
 * - `timer`: a delay, deadline or callback-timeout timer fired for the parked attempt `seq`;
 * - `resume`: an approver answered a decision;
 * - `callback`: the owning service completed the step it had answered with 202 (`seq` is the token's);
 * - `children`: fan-in, with the children's state as the parent saw it.
 */
export type TraceEvent =
  | { type: 'begin'; claimed?: boolean }
  | { type: 'outcome'; outcome: StepOutcome }
  | { type: 'progress'; record: FuncRecord }
  | { type: 'timer'; purpose: TimerPurpose; seq: number }
  | { type: 'resume'; args: ResumeArgs }
  | { type: 'callback'; seq: number; outcome: StepOutcome }
  | { type: 'children'; seq: number; state: ChildrenState };

export interface TraceEntry {
  event: TraceEvent;
  /** What the core decided; null when it had nothing to do (a stale timer, children still open). */
  decision: Decision | null;
  /** The virtual clock when the event was applied (ms since the epoch). Informational: replay ignores it. */
  atMs: number;
}

/** The parts of a transition that are decisions: what a replay must reproduce exactly. */
export interface Decision {
  state: string;
  cause: string;
  currentStep: string | null;
  attempts: Transition['attempts'];
  commands: Transition['commands'];
  runAfterMs: number | null;
  output: unknown;
  error: unknown;
}

/** Every committed input of one instance, in order. A child's trace is its own; its parent's holds the `children` events. */
export interface Trace {
  logicHash: string;
  /** The instance as created (or spawned), before the first transition. */
  initial: Instance;
  entries: TraceEntry[];
}

export function decisionOf(t: Transition): Decision {
  const i = t.instance;
  return {
    state: i.state,
    cause: t.cause,
    currentStep: i.currentStep,
    attempts: t.attempts,
    commands: t.commands,
    runAfterMs: t.runAfterMs,
    output: i.output,
    error: i.error,
  };
}

/** What a replayed event produced when it differs: a decision, nothing, or a refusal. */
export type Replayed = Decision | null | { refused: string; message: string };

export class ReplayDivergence extends FlowError {
  constructor(index: number, expected: Decision | null, actual: Replayed) {
    super(
      'FLOW_REPLAY_DIVERGED',
      `replay diverged at event ${index}:\n  recorded: ${canonicalJson(expected)}\n  replayed: ${canonicalJson(actual)}`,
      { details: { index, expected, actual } },
    );
  }
}

/**
 * Applies one event to the core — the same functions the workers, the timer poller and the API use.
 * Null: the core had nothing to do. Throws the core's refusal (`Refused`) for an input that does
 * not fit the instance; nothing changed then.
 */
export async function apply(logic: LogicVersion, inst: Instance, event: TraceEvent): Promise<Transition | null> {
  switch (event.type) {
    case 'begin':
      return event.claimed === true ? beginClaimed(logic, inst) : begin(logic, inst);
    case 'outcome':
      return onOutcome(logic, inst, event.outcome);
    case 'progress':
      return onProgress(logic, inst, event.record);
    case 'timer':
      return onTimer(logic, inst, { purpose: event.purpose, seq: event.seq });
    case 'resume':
      return onResume(logic, inst, event.args);
    case 'callback':
      return onCallback(logic, inst, event.seq, event.outcome);
    case 'children':
      return onChildren(logic, inst, event.seq, event.state);
  }
}

/**
 * Re-derives every decision of a recorded run from its events alone — no executor, no fake, no
 * module runtime, no clock — and throws ReplayDivergence (FLOW_REPLAY_DIVERGED) at the first
 * decision that differs, including an event the core now refuses. Returns the final instance.
 * Children are not followed: replay each child's own trace with its own LogicVersion.
 */
export async function replay(logic: LogicVersion, trace: Trace): Promise<Instance> {
  if (logic.hash !== trace.logicHash) {
    throw new FlowError('FLOW_REPLAY_WRONG_VERSION', `trace was recorded on ${trace.logicHash}, not ${logic.hash}`);
  }
  let inst = trace.initial;
  for (const [i, entry] of trace.entries.entries()) {
    let t: Transition | null;
    try {
      t = await apply(logic, inst, entry.event);
    } catch (err) {
      if (!(err instanceof FlowError)) throw err;
      throw new ReplayDivergence(i, entry.decision, { refused: err.code, message: err.message });
    }
    const actual = t === null ? null : decisionOf(t);
    if (canonicalJson(actual) !== canonicalJson(entry.decision)) throw new ReplayDivergence(i, entry.decision, actual);
    if (t !== null) inst = t.instance;
  }
  return inst;
}
