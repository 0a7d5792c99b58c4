import type { LogicVersion } from '../../contracts/index.ts';
import { FlowError } from '../../contracts/index.ts';
import { attemptTimeoutMs } from '../core/flow.ts';
import type { Instance } from '../core/instance.ts';
import type { ResumeTokens } from './resume-tokens.ts';
import { type EffectDef, type EffectResult, type EffectKind, type Executor, type Executors, flowHeaders } from '../executors/index.ts';

export { DEFAULT_TIMEOUT_MS } from '../core/flow.ts';

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
  signal?: AbortSignal,
): Promise<EffectResult> {
  const running = instance.ctx.running;
  if (running === null) throw new Error(`workflow ${instance.id} has no prepared attempt`);
  const step = logic.steps[running.step];
  const def = (running.kind === 'step' ? step : step?.compensate) as EffectDef | undefined;
  if (def === undefined || !(def.kind in executors)) {
    throw new Error(`workflow ${instance.id}: ${running.kind} ${running.step} is not an effect`);
  }
  const timeoutMs = attemptTimeoutMs(logic, running);
  try {
    const execute = executors[def.kind] as Executor<EffectKind>;
    const headers = flowHeaders(instance, running);
    if (running.kind === 'step') headers['x-flow-resume-token'] = tokens.sign(instance.id, running.seq);
    return await execute(def, { logic, instance, running, input: running.input, headers, timeoutMs, signal });
  } catch (err) {
    if (err instanceof FlowError) {
      return { status: 'failed', retryable: false, error: { code: err.code, message: err.message } };
    }
    return { status: 'failed', retryable: true, error: { code: 'EXECUTOR_ERROR', message: (err as Error).message } };
  }
}
