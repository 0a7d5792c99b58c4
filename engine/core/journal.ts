import type { FlowErrorBody, LogicVersion, StepOutcome, WorkflowState } from '../../contracts/index.ts';
import { begin, beginClaimed, isUnstarted, onOutcome, onProgress } from './flow.ts';
import type { FuncRecord, Instance, JsonValue, TimerPurpose } from './instance.ts';
import type { Transition } from './transition.ts';
import { type CancelArgs, cancel, type ForceCompleteArgs, forceComplete, type RewindArgs, retry, rewind } from './verbs.ts';
import { migrate, type StepRenames } from './migrate.ts';
import { FlowError } from '../../contracts/errors.ts';
import { type ChildrenState, type MessageArgs, onCallback, onChildren, onMessage, onResume, onTimer, type ResumeArgs } from './wake.ts';

/**
 * One input to the core. Each carries everything the core needs, so a replay calls nothing. The
 * engine journals every committed one with its decision (store/journal.ts), and the in-process
 * runner records them the same way, so both produce the same kind of trace:
 * - `begin`: the first transition (`claimed`: a spawned child, begun by the worker that claimed it);
 * - `outcome`: the result of the prepared attempt (a fake's answer, or a func step's end);
 * - `progress`: a func step's host call was answered; `record` is the grown record;
 * - `timer`: a delay, deadline or callback-timeout timer fired for the parked attempt `seq`;
 * - `resume`: an approver answered a decision;
 * - `message`: a message was handed to the waitFor step it is parked on (delivered, or buffered before);
 * - `callback`: the owning service completed the step it had answered with 202 (`seq` is the token's);
 * - `children`: fan-in, with the children's state as the parent saw it;
 * - `verb`: an operator verb, with its arguments;
 * - `migrate`: the instance moved to a later version `to` of its definition, its steps renamed by
 *   `renames` (core/migrate.ts); the events after it are applied on `to`.
 */
export type TraceEvent =
  | { type: 'begin'; claimed?: boolean }
  | { type: 'outcome'; outcome: StepOutcome }
  | { type: 'progress'; record: FuncRecord }
  | { type: 'timer'; purpose: TimerPurpose; seq: number }
  | { type: 'resume'; args: ResumeArgs }
  | { type: 'message'; args: MessageArgs }
  | { type: 'callback'; seq: number; outcome: StepOutcome }
  | { type: 'children'; seq: number; state: ChildrenState }
  | VerbEvent
  | MigrateEvent;

export interface MigrateEvent {
  type: 'migrate';
  from: { version: number; hash: string };
  to: { version: number; hash: string };
  renames: StepRenames;
}

export type VerbEvent =
  | { type: 'verb'; verb: 'retry' }
  | { type: 'verb'; verb: 'repair' | 'replay_from'; args: RewindArgs }
  | { type: 'verb'; verb: 'cancel'; args: CancelArgs }
  | { type: 'verb'; verb: 'force_complete'; args: ForceCompleteArgs };

export interface TraceEntry {
  event: TraceEvent;
  /** What the core decided; null when it had nothing to do (a stale timer, children still open). */
  decision: Decision | null;
  /** The clock when the event was applied (ms since the epoch). Informational: replay ignores it. */
  atMs: number;
  /**
   * The state the instance had in the store when the event was applied (a claimed instance is
   * `processing` there). Set in traces exported from the store; replay applies the event to it.
   */
  from?: WorkflowState;
}

/** The parts of a transition that are decisions: what a replay must reproduce exactly. */
export interface Decision {
  /** `pending` and `processing` are one state here: which of them is the hand-over rule's, not a decision. */
  state: string;
  cause: string;
  currentStep: string | null;
  attempts: Transition['attempts'];
  commands: Transition['commands'];
  runAfterMs: number | null;
  output: unknown;
  error: unknown;
  /** The search attributes the transition set; absent when it set none (core/attributes.ts). */
  attributes?: Transition['attributes'];
}

/** How an exported instance ended in the store: replay checks that it ends the same way. */
export interface FinalRecord {
  state: WorkflowState;
  currentStep: string | null;
  generation: number;
  output: JsonValue;
  error: FlowErrorBody | null;
}

/** Every committed input of one instance, in order. A child's trace is its own; its parent's holds the `children` events. */
export interface Trace {
  /** `sentin8-flow.trace/1` on exported traces. */
  format?: string;
  logicHash: string;
  /** The instance as created (or spawned), before the first transition. */
  initial: Instance;
  entries: TraceEntry[];
  /** Set on traces exported from the store. */
  final?: FinalRecord;
}

export function decisionOf(t: Transition): Decision {
  const i = t.instance;
  return {
    state: i.state === 'processing' ? 'pending' : i.state,
    cause: t.cause,
    currentStep: i.currentStep,
    attempts: t.attempts,
    commands: t.commands,
    runAfterMs: t.runAfterMs,
    output: i.output,
    error: i.error,
    ...(t.attributes === undefined ? {} : { attributes: t.attributes }),
  };
}

/**
 * Applies one event to the core — the same functions the workers, the timer poller, the verbs and
 * the API use. Null: the core had nothing to do. Throws the core's refusal (`Refused`) for an input
 * that does not fit the instance; nothing changed then. `goOn`: a worker that holds the lease and
 * goes on with the next attempt itself (the hand-over rule of Draft.done(); a replay leaves it out,
 * since decisions do not tell `pending` from `processing`).
 */
/**
 * What a worker does first with an instance it has just leased, the engine's worker pool and the
 * in-process runner alike: begin a spawned child nobody has begun (the `begin` event, claimed), apply
 * the wake-ups of a woken waiting instance, or else run the attempt its last commit prepared.
 */
export type ClaimedWork = { do: 'begin'; event: Extract<TraceEvent, { type: 'begin' }> } | { do: 'wakes' } | { do: 'attempt' };

export function claimedWork(inst: Instance): ClaimedWork {
  if (isUnstarted(inst)) return { do: 'begin', event: { type: 'begin', claimed: true } };
  return inst.state === 'waiting' ? { do: 'wakes' } : { do: 'attempt' };
}

export async function apply(
  logic: LogicVersion,
  inst: Instance,
  event: TraceEvent,
  goOn = false,
  /** The versions a `migrate` event may move to, by hash; the caller goes on with the target for the events after it. */
  versions?: (hash: string) => LogicVersion | undefined,
): Promise<Transition | null> {
  switch (event.type) {
    case 'migrate': {
      const to = versions?.(event.to.hash);
      if (to === undefined) {
        throw new FlowError('FLOW_REPLAY_VERSION_MISSING', `the trace moved to version ${event.to.version} (${event.to.hash}): pass that LogicVersion among the versions`, { status: 422 });
      }
      return migrate(logic, to, inst, event.renames);
    }
    case 'begin':
      return event.claimed === true ? beginClaimed(logic, inst, goOn) : begin(logic, inst);
    case 'outcome':
      return onOutcome(logic, inst, event.outcome, goOn);
    case 'progress':
      return onProgress(logic, inst, event.record, goOn);
    case 'timer':
      return onTimer(logic, inst, { purpose: event.purpose, seq: event.seq }, goOn);
    case 'resume':
      return onResume(logic, inst, event.args);
    case 'message':
      return onMessage(logic, inst, event.args);
    case 'callback':
      return onCallback(logic, inst, event.seq, event.outcome);
    case 'children':
      return onChildren(logic, inst, event.seq, event.state, goOn);
    case 'verb':
      return applyVerb(logic, inst, event);
  }
}

function applyVerb(logic: LogicVersion, inst: Instance, event: VerbEvent): Promise<Transition> {
  switch (event.verb) {
    case 'retry':
      return retry(logic, inst);
    case 'repair':
      return rewind(logic, inst, 'verb.repair', event.args);
    case 'replay_from':
      return rewind(logic, inst, 'verb.replay_from', event.args);
    case 'cancel':
      return cancel(logic, inst, event.args);
    case 'force_complete':
      return forceComplete(logic, inst, event.args);
  }
}
