import type { FuncRuntime } from '../../host-functions/index.ts';
import { RETRYABLE_FUNC_CODES } from '../../host-functions/index.ts';
import { type FuncRecord, funcKey, type JsonValue } from '../core/instance.ts';
import { keys, unitHash } from '../core/retry.ts';
import { type HandlerProfiles, resolveHandler } from './handlers.ts';
import { callHttp } from './http-call.ts';
import type { Executor } from './index.ts';

/**
 * Runs a `func` step's WASM module (DESIGN.md §6). Recorded host calls are answered from the
 * record; the first unrecorded one suspends the run, is made here as a proxy-back call with key
 * `<wf>:<step>:<gen>:call:<n>`, and comes back as `progress` so the worker persists it before
 * the module runs again. A crash therefore never repeats a recorded call, and a replay makes none.
 */
export function funcExecutor(runtime: FuncRuntime, handlers: HandlerProfiles): Executor<'func'> {
  return async (def, a) => {
    const mod = a.logic.modules?.[def.module];
    if (mod === undefined) {
      return { status: 'failed', retryable: false, error: { code: 'FLOW_UNKNOWN_MODULE', message: `module ${def.module} is not declared` } };
    }
    const key = funcKey(a.running);
    // the clock is taken once per step and generation, then always served from the record
    const record: FuncRecord = a.instance.ctx.funcs?.[key] ?? {
      clock: { nowMs: Date.now(), seed: Math.floor(unitHash(`${a.instance.id}:${key}`) * 2 ** 31) },
      calls: [],
    };
    const result = await runtime.run({
      moduleHash: mod.sha256,
      exportName: def.export ?? 'run',
      input: a.input,
      declaredImports: Object.keys(mod.imports),
      recorded: record.calls,
      clock: record.clock,
      timeoutMs: a.timeoutMs,
    });
    if (result.status === 'done') return { status: 'succeeded', output: result.output };
    if (result.status === 'failed') {
      return { status: 'failed', retryable: RETRYABLE_FUNC_CODES.has(result.error.code as never), error: result.error };
    }

    const { n, importName, request } = result.call;
    const target = mod.imports[importName]!;
    const profile = resolveHandler(handlers, target.handler ?? a.instance.domain);
    const idempotencyKey = keys.hostCall(a.running.idempotencyKey, n);
    const outcome = await callHttp({
      method: target.method ?? 'POST',
      url: profile.url.replace(/\/$/, '') + target.path,
      headers: { ...a.headers, 'idempotency-key': idempotencyKey, ...(profile.token ? { authorization: `Bearer ${profile.token}` } : {}) },
      body: request,
      timeoutMs: a.timeoutMs,
    });
    // a transient failure fails this attempt (the step's retry policy applies; the record stays)
    if (outcome.status === 'failed' && outcome.retryable) return outcome;
    const response =
      outcome.status === 'succeeded'
        ? outcome.output
        : outcome.status === 'failed'
          ? { error: outcome.error }
          : { error: { code: 'HOST_CALL_PARKED', message: 'a host call cannot answer 202 waiting', status: 202 } };
    return {
      status: 'progress',
      record: { clock: record.clock, calls: [...record.calls, { n, importName, request: request as JsonValue, response: response as JsonValue }] },
    };
  };
}
