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

/** One line per thing an operator looks for on the worker side; every hook is cheap and never throws. */
export function logObserver(log: FlowLogger): TransitionObserver {
  return {
    onAttempt(_logic, instance, result) {
      if (result.status !== 'failed') return;
      log.warn({ ...instanceFields(instance), code: result.error.code, retryable: result.retryable, error: result.error.message }, 'attempt failed');
    },
    onTransition(from, t, committed) {
      if (!committed) return;
      // the attempt that just ended is `from`'s; the fields name it
      const fields = { ...instanceFields(from), state: t.instance.state, cause: t.cause, ...(t.instance.error ? { code: t.instance.error.code } : {}) };
      if (t.cause === 'retry_scheduled' || t.cause === 'compensation_retry_scheduled') {
        log.info({ ...fields, retryInMs: t.runAfterMs }, t.cause === 'retry_scheduled' ? 'retry scheduled' : 'compensation retry scheduled');
      } else if (t.instance.state === 'dead_lettered' && from.state !== 'dead_lettered') {
        log.error(fields, 'dead-lettered: an operator must act');
      } else if (t.instance.state === 'compensating' && from.state !== 'compensating') {
        log.warn(fields, 'compensating: undoing the completed steps');
      } else if (t.cause === 'compensation_succeeded') {
        log.info(fields, 'compensation succeeded');
      } else if (t.instance.state !== from.state && TERMINAL_STATES.has(t.instance.state) && t.instance.state !== 'completed') {
        log.warn(fields, `ended ${t.instance.state}`);
      }
    },
    onLeaseLost(workflowId, held) {
      const where = held === undefined ? {} : { env: held.env, logicId: held.logicId, version: held.version };
      log.warn({ ...where, workflowId }, 'lease lost: another worker took the instance; the attempt in flight was abandoned');
    },
    onSlaBreached(b) {
      log.warn({ env: b.env, logicId: b.logicId, workflowId: b.workflowId, ...(b.step === null ? {} : { step: b.step }) }, 'SLA breached');
    },
    onError(workflowId, err) {
      log.error({ workflowId, err }, 'unexpected error');
    },
  };
}
