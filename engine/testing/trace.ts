import { canonicalJson, FlowError, type LogicVersion, type StepOutcome } from '../../contracts/index.ts';
import { begin, onOutcome } from '../core/flow.ts';
import type { Instance } from '../core/instance.ts';
import type { Transition } from '../core/transition.ts';

/** One input to the core and the decision it produced. */
export type TraceEvent = { type: 'begin' } | { type: 'outcome'; outcome: StepOutcome };
export interface TraceEntry {
  event: TraceEvent;
  decision: Decision;
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

export interface Trace {
  logicHash: string;
  /** The instance as created, before the first transition. */
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

export class ReplayDivergence extends FlowError {
  constructor(index: number, expected: Decision, actual: Decision) {
    super(
      'FLOW_REPLAY_DIVERGED',
      `replay diverged at event ${index}:\n  recorded: ${canonicalJson(expected)}\n  replayed: ${canonicalJson(actual)}`,
      { details: { index, expected, actual } },
    );
  }
}

/** Applies one event to the core (the same functions the workers use). */
export function apply(logic: LogicVersion, inst: Instance, event: TraceEvent): Promise<Transition> {
  return event.type === 'begin' ? begin(logic, inst) : onOutcome(logic, inst, event.outcome);
}

/**
 * Re-derives every decision of a recorded run from its events alone — no executor, no fake, no
 * clock — and throws ReplayDivergence at the first decision that differs. Returns the final instance.
 */
export async function replay(logic: LogicVersion, trace: Trace): Promise<Instance> {
  if (logic.hash !== trace.logicHash) {
    throw new FlowError('FLOW_REPLAY_WRONG_VERSION', `trace was recorded on ${trace.logicHash}, not ${logic.hash}`);
  }
  let inst = trace.initial;
  for (const [i, entry] of trace.entries.entries()) {
    const t = await apply(logic, inst, entry.event);
    const actual = decisionOf(t);
    if (canonicalJson(actual) !== canonicalJson(entry.decision)) throw new ReplayDivergence(i, entry.decision, actual);
    inst = t.instance;
  }
  return inst;
}
