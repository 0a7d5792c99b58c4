import type { FlowErrorBody, Json, LogicVersion, WorkflowState } from '../../contracts/index.ts';

type JsonValue = ReturnType<typeof Json.parse>;

/**
 * The engine's view of one instance: the `workflows` row. `ctx` is the core's working memory and
 * is persisted with every transition, so any worker can pick the instance up where it stopped.
 */
export interface Instance {
  id: string;
  env: string;
  domain: string;
  logicId: string;
  version: number;
  logicHash: string;
  state: WorkflowState;
  input: JsonValue;
  output: JsonValue;
  currentStep: string | null;
  error: FlowErrorBody | null;
  generation: number;
  correlationId: string | null;
  parentId: string | null;
  /** Which parked attempt of the parent spawned this child. */
  parentSeq: number | null;
  branchIndex: number | null;
  ctx: Ctx;
}

export interface Ctx {
  /** step_runs rows written so far; the next row gets this number. */
  seq: number;
  /**
   * Latest output of each step in this generation: the `steps` of expressions. Outputs are
   * immutable values, shared between an instance and the transitions made from it. The store keeps
   * each in a row of its own, written only by the transition that set it (Transition.outputsChanged).
   */
  outputs: Record<string, JsonValue>;
  /** The decision that resumed the previous step, visible to the step after it. */
  decision: JsonValue;
  /** The attempt prepared (its row written, its compensation registered) and not yet finished. */
  running: Running | null;
  /** Registered compensations, in registration order; they run last first. */
  compensations: Registration[];
  /** Where compensation ends: `compensated` after a failure, `cancelled` after a cancel. */
  unwindTo: 'compensated' | 'cancelled' | null;
  /**
   * A repair with `compensateRewound` under way: only the registrations in `undo` unwind, and
   * when they are done the repair rewinds to `step` (with `input`) and re-runs from there.
   */
  rewinding?: PendingRewind;
  /** Who answered the last decision; forwarded as X-Flow-Approved-By on later calls. */
  approvedBy: Approver | null;
  /** Steps whose output is in `outputs`, in the order they finished (a rewind cuts it). */
  order: string[];
  /** The last attempt number of each step in this generation. */
  attempts: Record<string, number>;
  /**
   * Steps entered more than once in this generation (a loop), with their visit count; a step
   * entered once is absent. The visit is part of the idempotency key (keys.step).
   */
  visits?: Record<string, number>;
  /** What func steps recorded, by `funcKey`: their clock and every host call made. */
  funcs?: Record<string, FuncRecord>;
}

/** The record that makes a func step replayable: its clock and its host calls in call order. */
export interface FuncRecord {
  clock: { nowMs: number; seed: number };
  calls: { n: number; importName: string; request: JsonValue; response: JsonValue }[];
}

/** Func records survive retries of the same visit of a step in a generation, and nothing else. */
export function funcKey(running: Running): string {
  const visit = running.visit ?? 1;
  return `${running.kind}:${running.step}:${running.generation}${visit > 1 ? `:visit:${visit}` : ''}`;
}

/** A rewind waiting for the compensations of the effects it rewinds (Ctx.rewinding). */
export interface PendingRewind {
  step: string;
  input?: JsonValue;
  /** Indexes into ctx.compensations to run first, last first. */
  undo: number[];
}

/** The identity that resumed a decision, as the caller's auth established it. */
export interface Approver {
  subject: string;
  scopes: string[];
}

export interface Running {
  seq: number;
  kind: 'step' | 'compensation';
  step: string;
  attempt: number;
  generation: number;
  input: JsonValue;
  idempotencyKey: string;
  /** The attempt at which the current retry budget began (a `retry` verb grants a fresh one). */
  budgetStart: number;
  /** Index into ctx.compensations for a compensation run. */
  registration?: number;
  /** Which visit of the step this is, when the step was entered more than once (absent: the first). */
  visit?: number;
  /** How long 429/503 answers have held this step so far without using an attempt (hold.ts). */
  heldMs?: number;
  /** How many holds (throttled answers and open circuits) this step has waited out. */
  holds?: number;
}

export interface Registration {
  step: string;
  generation: number;
  /** The step's own evaluated input: the compensation's input unless `compensate.input` says otherwise. */
  stepInput: JsonValue;
  state: 'registered' | 'running' | 'succeeded' | 'failed';
  /** The visit of the step that registered it (absent: the first): each visit is undone on its own. */
  visit?: number;
  attempts: number;
  error: FlowErrorBody | null;
}

/** A step_runs row to write: `insert` for a new attempt, `finish` for its result. */
export type AttemptWrite =
  | {
      op: 'insert';
      seq: number;
      step: string;
      attempt: number;
      generation: number;
      kind: 'step' | 'compensation';
      state: 'running' | 'succeeded' | 'failed' | 'parked';
      input: JsonValue;
      output: JsonValue;
      error: FlowErrorBody | null;
      idempotencyKey: string | null;
    }
  | { op: 'finish'; seq: number; state: 'succeeded' | 'failed' | 'parked' | 'superseded'; output: JsonValue; error: FlowErrorBody | null };

/**
 * What a timer ends when it fires, for the parked attempt it names: a `delay`, a decision's
 * `deadline`, or the wait for a 202-answered step's `callback` (its `timeoutMs`).
 */
export type TimerPurpose = 'delay' | 'deadline' | 'callback';

/** Side effects that must commit with the transition: the shell performs them after the commit. */
export type Command =
  | { type: 'outbox'; kind: 'event' | 'callback'; topic: string; payload: JsonValue; idempotencyKey: string }
  /** Fires after `delayMs` (database clock) or `at` (an ISO timestamp); `seq` names the parked attempt. */
  | { type: 'timer'; purpose: TimerPurpose; delayMs: number | null; at: string | null; seq: number }
  /**
   * A service-level timer (docs/sla.md): due `delayMs` after the commit; the instance (step null)
   * or `step`, still not done then, has breached its SLA. It wakes nothing: the store records the breach.
   */
  | { type: 'sla'; step: string | null; within: string; delayMs: number }
  /** One child instance per input, of `logicId` (pinned to `version`, else the active one). */
  | { type: 'spawn'; logicId: string; version: number | null; inputs: JsonValue[]; seq: number }
  /** Cancel every descendant that has not ended; with `compensate`, each runs its compensations first. */
  | { type: 'cancelChildren'; compensate?: boolean };

export type { JsonValue };

/**
 * A new instance as it is created, before its first transition: pending at the definition's
 * start, nothing run. The caller picks the id (the core reads no randomness).
 */
export function createInstance(logic: LogicVersion, spec: { id: string; env: string; input: JsonValue; correlationId: string | null }): Instance {
  return {
    id: spec.id,
    env: spec.env,
    domain: logic.domain,
    logicId: logic.logicId,
    version: logic.version,
    logicHash: logic.hash,
    state: 'pending',
    input: spec.input,
    output: null,
    currentStep: logic.start,
    error: null,
    generation: 0,
    correlationId: spec.correlationId,
    parentId: null,
    parentSeq: null,
    branchIndex: null,
    ctx: initialCtx(),
  };
}

export function initialCtx(): Ctx {
  return {
    seq: 0,
    outputs: {},
    decision: null,
    running: null,
    compensations: [],
    unwindTo: null,
    approvedBy: null,
    order: [],
    attempts: {},
  };
}
