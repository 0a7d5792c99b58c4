import type { Context } from '@opentelemetry/api';
import type { LogicVersion } from '../../contracts/index.ts';
import { FlowError } from '../../contracts/index.ts';
import { attemptTimeoutMs } from '../core/flow.ts';
import type { Instance, Running } from '../core/instance.ts';
import type { ResumeTokens } from './resume-tokens.ts';
import { type EffectDef, type EffectResult, type EffectKind, type Executor, type Executors, flowHeaders } from '../executors/index.ts';

export { DEFAULT_TIMEOUT_MS } from '../core/flow.ts';

/**
 * The longest an attempt may take, whatever its step says: `timeoutMs` is the publisher's, and a
 * module that spins, or a service that never answers, holds a worker for that long. The effective
 * timeout is the smaller of the step's and the cap (`func` steps have their own, lower cap).
 * (Defaults: 5 minutes, 1 minute for func; FLOW_STEP_TIMEOUT_MAX_MS, FLOW_FUNC_TIMEOUT_MAX_MS)
 */
export interface TimeoutCaps {
  stepMs: number;
  funcMs: number;
}
export const DEFAULT_TIMEOUT_CAPS: TimeoutCaps = { stepMs: 300_000, funcMs: 60_000 };

/** The attempt's timeout under the caps. */
function cappedTimeoutMs(logic: LogicVersion, running: Running, kind: EffectKind, caps: TimeoutCaps): number {
  return Math.min(attemptTimeoutMs(logic, running), caps.stepMs, kind === 'func' ? caps.funcMs : Number.POSITIVE_INFINITY);
}

/**
 * Runs the instance's prepared attempt (a step or a compensation) through the executor of its
 * kind. An executor that throws a FlowError (unknown handler, host not allowed) has met a
 * configuration problem that retrying cannot fix: that is a permanent failure. Anything else
 * thrown is unexpected and treated as transient.
 */
export async function executeAttempt(
  logic: LogicVersion,
  instance: Instance,
  executors: Executors,
  tokens: ResumeTokens,
  signals: { signal?: AbortSignal; halt?: AbortSignal; trace?: Context | undefined } = {},
  caps: TimeoutCaps = DEFAULT_TIMEOUT_CAPS,
): Promise<EffectResult> {
  const running = instance.ctx.running;
  if (running === null) throw new Error(`workflow ${instance.id} has no prepared attempt`);
  const def = effectOf(logic, running);
  if (def === undefined || !(def.kind in executors)) {
    throw new Error(`workflow ${instance.id}: ${running.kind} ${running.step} is not an effect`);
  }
  const timeoutMs = cappedTimeoutMs(logic, running, def.kind, caps);
  try {
    const execute = executors[def.kind] as Executor<EffectKind>;
    const headers = flowHeaders(instance, running);
    if (running.kind === 'step') headers['x-flow-resume-token'] = tokens.sign(instance.id, running.seq);
    return await execute(def, { logic, instance, running, input: running.input, headers, timeoutMs, ...signals });
  } catch (err) {
    if (err instanceof FlowError) {
      return { status: 'failed', retryable: false, error: { code: err.code, message: err.message } };
    }
    return { status: 'failed', retryable: true, error: { code: 'EXECUTOR_ERROR', message: (err as Error).message } };
  }
}

/**
 * Starts the effect-free part of the instance's prepared attempt, if its executor has one (a
 * func step's module run), while the commit that prepared it is in flight. The attempt itself
 * still runs through executeAttempt, and only after that commit has landed.
 */
export function startAhead(logic: LogicVersion, instance: Instance, executors: Executors, caps: TimeoutCaps = DEFAULT_TIMEOUT_CAPS): void {
  const running = instance.ctx.running;
  const def = running === null ? undefined : effectOf(logic, running);
  if (running === null || def === undefined || !(def.kind in executors)) return;
  const ahead = (executors[def.kind] as Executor<EffectKind>).ahead;
  ahead?.(def, { logic, instance, running, input: running.input, timeoutMs: cappedTimeoutMs(logic, running, def.kind, caps) });
}

/**
 * Whether the prepared attempt is one HTTP call (a proxy or http step or compensation): its
 * attempt span is then that call's client span, since the executors of those kinds say so
 * (`traceIsCall`), and a step makes one span instead of an attempt span and a client span.
 */
export function isOneCall(logic: LogicVersion, running: Running): boolean {
  const kind = effectOf(logic, running)?.kind;
  return kind === 'proxy' || kind === 'http';
}

/** The effect the prepared attempt runs: the step's, or its compensation's. */
export function effectOf(logic: LogicVersion, running: Running): EffectDef | undefined {
  const step = logic.steps[running.step];
  return (running.kind === 'step' ? step : step?.compensate) as EffectDef | undefined;
}
