import { pino, type DestinationStream, type Logger } from 'pino';
import { TERMINAL_STATES } from '../../contracts/states.ts';
import type { Instance } from '../core/instance.ts';
import type { TransitionObserver } from './observer.ts';

/**
 * The engine's structured log: one pino logger, and the fields every line about an instance
 * carries, so a line can be found by env, definition, instance, step and attempt whatever wrote
 * it. The worker-side lines (failures, retries, dead letters, compensations, lost leases) come
 * from `logObserver`; other runtime parts take the same logger and `instanceFields()`.
 */
export type FlowLogger = Logger;

export interface LoggerOptions {
  /** pino's level: `silent` writes nothing. (Default: `info`) */
  level?: string;
  /** Where lines go. (Default: stdout) */
  destination?: DestinationStream;
}

export function createLogger(o: LoggerOptions = {}): FlowLogger {
  const options = { level: o.level ?? 'info', base: { service: 'sentin8-flow' } };
  return o.destination === undefined ? pino(options) : pino(options, o.destination);
}

/** A logger that writes nothing: the engine's default, so embedding it in a test or a script stays quiet. */
export const silentLogger: FlowLogger = pino({ level: 'silent' });

/** The fields of a line about an instance: env, logicId, workflowId, step and, while one runs, attempt and its kind. */
export function instanceFields(inst: Instance): Record<string, unknown> {
  const running = inst.ctx.running;
  return {
    env: inst.env,
    logicId: inst.logicId,
    version: inst.version,
    workflowId: inst.id,
    step: running?.step ?? inst.currentStep,
    ...(running === null ? {} : { attempt: running.attempt, kind: running.kind, generation: running.generation }),
  };
}

/**
 * The worker-side events, by the name each line carries in its `event` field: one field to
 * filter on, whichever part of the runtime wrote the line. Other parts add theirs (a circuit
 * opening and closing) through `logEvent`.
 */
export const WORKER_EVENTS = {
  attemptFailed: 'attempt_failed',
  retryScheduled: 'retry_scheduled',
  compensationRetryScheduled: 'compensation_retry_scheduled',
  deadLettered: 'dead_lettered',
  compensating: 'compensating',
  compensationSucceeded: 'compensation_succeeded',
  ended: 'ended',
  leaseLost: 'lease_lost',
  circuitOpen: 'circuit_open',
  circuitClosed: 'circuit_closed',
} as const;

/**
 * Writes one worker-side event line: `event` names it (WORKER_EVENTS), `fields` say where —
 * `instanceFields()` for an instance, or env and handler for what is not one instance's.
 */
export function logEvent(log: FlowLogger, level: 'info' | 'warn' | 'error', event: string, fields: Record<string, unknown>, msg: string): void {
  log[level]({ ...fields, event }, msg);
}

/** One line per thing an operator looks for on the worker side; every hook is cheap and never throws. */
export function logObserver(log: FlowLogger): TransitionObserver {
  const E = WORKER_EVENTS;
  return {
    onAttempt(_logic, instance, result) {
      if (result.status !== 'failed') return;
      const fields = { ...instanceFields(instance), code: result.error.code, retryable: result.retryable, error: result.error.message };
      logEvent(log, 'warn', E.attemptFailed, fields, 'attempt failed');
    },
    onTransition(from, t, committed) {
      if (!committed) return;
      // the attempt that just ended is `from`'s; the fields name it
      const fields = { ...instanceFields(from), state: t.instance.state, cause: t.cause, ...(t.instance.error ? { code: t.instance.error.code } : {}) };
      if (t.cause === 'retry_scheduled') {
        logEvent(log, 'info', E.retryScheduled, { ...fields, retryInMs: t.runAfterMs }, 'retry scheduled');
      } else if (t.cause === 'compensation_retry_scheduled') {
        logEvent(log, 'info', E.compensationRetryScheduled, { ...fields, retryInMs: t.runAfterMs }, 'compensation retry scheduled');
      } else if (t.instance.state === 'dead_lettered' && from.state !== 'dead_lettered') {
        logEvent(log, 'error', E.deadLettered, fields, 'dead-lettered: an operator must act');
      } else if (t.instance.state === 'compensating' && from.state !== 'compensating') {
        logEvent(log, 'warn', E.compensating, fields, 'compensating: undoing the completed steps');
      } else if (t.cause === 'compensation_succeeded') {
        logEvent(log, 'info', E.compensationSucceeded, fields, 'compensation succeeded');
      } else if (t.instance.state !== from.state && TERMINAL_STATES.has(t.instance.state) && t.instance.state !== 'completed') {
        logEvent(log, 'warn', E.ended, fields, `ended ${t.instance.state}`);
      }
    },
    onLeaseLost(workflowId, held) {
      const where = held === undefined ? { workflowId } : instanceFields(held);
      logEvent(log, 'warn', E.leaseLost, where, 'lease lost: another worker took the instance; the attempt in flight was abandoned');
    },
    onSlaBreached(b) {
      log.warn({ env: b.env, logicId: b.logicId, workflowId: b.workflowId, ...(b.step === null ? {} : { step: b.step }) }, 'SLA breached');
    },
    onError(workflowId, err) {
      log.error({ workflowId, err }, 'unexpected error');
    },
  };
}
