/**
 * Instance states and the complete table of valid transitions (ARCHITECTURE.md, Contracts: states and transitions).
 *
 * This file is the single source of truth: the store refuses any state change that is not a row
 * of `TRANSITIONS`, and the database CHECK constraint on `flow.workflows.state` lists the same states.
 */

export const WorkflowState = {
  pending: 'pending',
  processing: 'processing',
  waiting: 'waiting',
  compensating: 'compensating',
  completed: 'completed',
  failed: 'failed',
  compensated: 'compensated',
  cancelled: 'cancelled',
  dead_lettered: 'dead_lettered',
} as const;
export type WorkflowState = (typeof WorkflowState)[keyof typeof WorkflowState];
export const WORKFLOW_STATES = Object.values(WorkflowState) as readonly WorkflowState[];

export const TERMINAL_STATES: ReadonlySet<WorkflowState> = new Set([
  'completed',
  'failed',
  'compensated',
  'cancelled',
  'dead_lettered',
]);

/** What moved an instance: an engine event, or an operator verb (prefixed `verb.`). */
export const TransitionCause = {
  claim: 'claim',
  release: 'release',
  stepSucceeded: 'step_succeeded',
  stepProgressed: 'step_progressed',
  retryScheduled: 'retry_scheduled',
  parked: 'parked',
  stepFailed: 'step_failed',
  compensationSucceeded: 'compensation_succeeded',
  compensationRetryScheduled: 'compensation_retry_scheduled',
  compensationExhausted: 'compensation_exhausted',
  resumed: 'resumed',
  deadlineExpired: 'deadline_expired',
  verbRetry: 'verb.retry',
  verbRepair: 'verb.repair',
  verbCancel: 'verb.cancel',
  verbResume: 'verb.resume',
  verbForceComplete: 'verb.force_complete',
  verbReplayFrom: 'verb.replay_from',
  verbMigrate: 'verb.migrate',
} as const;
export type TransitionCause = (typeof TransitionCause)[keyof typeof TransitionCause];
export const TRANSITION_CAUSES = Object.values(TransitionCause) as readonly TransitionCause[];

export interface Transition {
  readonly from: WorkflowState;
  readonly cause: TransitionCause;
  readonly to: WorkflowState;
  /** Why this transition exists, for readers and for `docs/`. */
  readonly why: string;
}

const t = (from: WorkflowState, cause: TransitionCause, to: WorkflowState, why: string): Transition => ({
  from,
  cause,
  to,
  why,
});

/**
 * Where running the flow on can stop: at an effect (pending), a park, the end, or a failure —
 * `dead_lettered` when unwinding meets a compensation whose input expression fails.
 */
const RUN_ON = ['pending', 'waiting', 'completed', 'failed', 'compensating', 'dead_lettered'] as const;

export const TRANSITIONS: readonly Transition[] = [
  t('pending', 'claim', 'processing', 'a worker leases a runnable instance'),
  t('processing', 'claim', 'processing', 'a worker reclaims an instance whose lease expired'),
  t('compensating', 'claim', 'compensating', 'a worker leases an instance to run its next compensation'),
  t('processing', 'release', 'pending', 'a worker shuts down and hands the instance back'),
  t('compensating', 'release', 'compensating', 'a worker shuts down during compensation'),

  t('processing', 'step_succeeded', 'processing', 'step done; the next step rides in the same commit'),
  t('processing', 'step_succeeded', 'pending', 'step done; the next step is left for any worker'),
  t('processing', 'step_succeeded', 'completed', 'the last step is done'),
  t('processing', 'step_progressed', 'processing', 'a func step recorded a host call and runs again'),
  t('processing', 'step_progressed', 'pending', 'a func step recorded a host call; the worker is stopping'),
  t('compensating', 'step_progressed', 'compensating', 'a func compensation recorded a host call'),
  t('processing', 'parked', 'waiting', 'a decision, delay, callback or children step parks the instance'),
  t('processing', 'retry_scheduled', 'pending', 'transient failure; runnable again after backoff'),
  t('processing', 'step_failed', 'compensating', 'failure with registered compensations'),
  t('processing', 'step_failed', 'failed', 'failure with nothing to compensate'),
  t('processing', 'step_failed', 'dead_lettered', 'a step used up its attempts'),

  t('compensating', 'compensation_succeeded', 'compensating', 'one compensation done, more remain'),
  t('compensating', 'compensation_succeeded', 'compensated', 'every registered compensation done'),
  t('compensating', 'compensation_succeeded', 'cancelled', 'cancelled with compensate:true; all compensations done'),
  ...(['pending', 'processing', 'waiting', 'completed', 'failed'] as const).map((to) =>
    t('compensating', 'compensation_succeeded', to, 'the effects a repair rewound are undone; it re-runs from its step'),
  ),
  t('compensating', 'compensation_retry_scheduled', 'compensating', 'compensation failed transiently'),
  t('compensating', 'compensation_exhausted', 'dead_lettered', 'a compensation used up its attempts'),

  // A wake-up runs the flow on to its next stop, which may be any of these.
  ...RUN_ON.flatMap((to) => [
    t('waiting', 'resumed', to, 'a timer, a callback or the last child arrived; the flow ran on'),
    t('waiting', 'verb.resume', to, 'an approver answered a decision; the flow ran on'),
  ]),
  t('waiting', 'resumed', 'processing', 'the worker that applied a fired timer runs the next step itself'),
  t('waiting', 'deadline_expired', 'processing', 'the worker that applied the deadline runs onTimeout itself'),
  ...(['failed', 'compensating', 'pending', 'waiting', 'completed', 'dead_lettered'] as const).map((to) =>
    t('waiting', 'deadline_expired', to, 'a decision deadline passed: fail, unwind, or follow onTimeout'),
  ),

  // Verbs that run the flow on stop wherever it next stops.
  ...RUN_ON.flatMap((to) => [
    t('failed', 'verb.retry', to, 'operator re-runs the failed step with a fresh attempt budget'),
    t('dead_lettered', 'verb.retry', to, 'operator re-runs the dead-lettered step with a fresh budget'),
    t('failed', 'verb.repair', to, 'operator rewinds to a step, with new input, under a new generation'),
    t('dead_lettered', 'verb.repair', to, 'operator rewinds to a step, with new input, under a new generation'),
    t('compensated', 'verb.repair', to, 'operator rewinds an unwound instance to a step'),
    t('dead_lettered', 'verb.force_complete', to, 'operator marks the stuck step done; the flow goes on'),
    t('waiting', 'verb.force_complete', to, 'operator ends a stuck wait with an output; the flow goes on'),
    ...(['completed', 'failed', 'compensated', 'dead_lettered'] as const).map((from) =>
      t(from, 'verb.replay_from', to, 'operator re-runs from a step with the original input, new generation'),
    ),
  ]),
  t('dead_lettered', 'verb.force_complete', 'compensated', 'operator marks the last failed compensation done'),
  t('dead_lettered', 'verb.force_complete', 'cancelled', 'operator marks the last compensation of a cancel done'),
  t('pending', 'verb.cancel', 'cancelled', 'operator cancels'),
  t('processing', 'verb.cancel', 'cancelled', 'operator cancels; the running worker is fenced out'),
  t('waiting', 'verb.cancel', 'cancelled', 'operator cancels a parked instance'),
  t('dead_lettered', 'verb.cancel', 'cancelled', 'operator gives up on a dead-lettered instance'),
  t('pending', 'verb.cancel', 'compensating', 'operator cancels and unwinds'),
  t('processing', 'verb.cancel', 'compensating', 'operator cancels and unwinds'),
  t('waiting', 'verb.cancel', 'compensating', 'operator cancels and unwinds'),
  t('dead_lettered', 'verb.cancel', 'compensating', 'operator cancels and unwinds'),
  ...(['pending', 'processing', 'waiting', 'dead_lettered'] as const).map((from) =>
    t(from, 'verb.cancel', 'dead_lettered', 'operator cancels and unwinds; a compensation input fails at once'),
  ),
  t('compensating', 'verb.cancel', 'cancelled', 'operator (or a cancelled parent) stops the unwinding'),
  t('compensating', 'verb.cancel', 'compensating', 'cancelled with compensate: the unwinding goes on, ends cancelled'),
  t('pending', 'verb.migrate', 'pending', 'operator moves an instance between steps to a later version'),
  t('waiting', 'verb.migrate', 'waiting', 'operator moves a parked instance to a later version'),
];

const allowed = new Set(TRANSITIONS.map((x) => `${x.from}|${x.cause}|${x.to}`));

export function isAllowedTransition(from: WorkflowState, cause: TransitionCause, to: WorkflowState): boolean {
  return allowed.has(`${from}|${cause}|${to}`);
}

/** The states a cause may move an instance out of (used to word refusals). */
export function statesAllowing(cause: TransitionCause): WorkflowState[] {
  return [...new Set(TRANSITIONS.filter((x) => x.cause === cause).map((x) => x.from))];
}
