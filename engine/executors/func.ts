import type { StepOutcome, Target } from '../../contracts/index.ts';
import type { FuncRuntime } from '../../host-functions/index.ts';
import { RETRYABLE_FUNC_CODES } from '../../host-functions/index.ts';
import { type FuncRecord, funcKey, type JsonValue } from '../core/instance.ts';
import { keys, unitHash } from '../core/retry.ts';
import { authorizationFor, type HandlerProfiles, resolveHandler } from './handlers.ts';
import { callHttp } from './http-call.ts';
import type { Attempt, Executor } from './index.ts';

/** One host call to make: where (a module import's proxy-back target), what, and under which key. */
export interface HostCall {
  target: Target;
  importName: string;
  n: number;
  request: unknown;
  idempotencyKey: string;
  attempt: Attempt;
}

/** Makes a host call: over HTTP in the engine, to a fake in the test runner. */
export type HostTransport = (call: HostCall) => Promise<StepOutcome>;

/**
 * Runs a `func` step's WASM module (host-functions/README.md). Recorded host calls are answered from the
 * record; the first unrecorded one suspends the run, is made through `transport` with key
 * `<attempt key>:call:<n>`, and comes back as `progress` so the caller persists it before the
 * module runs again. A crash therefore never repeats a recorded call, and a replay makes none.
 */
export function funcExecutor(runtime: FuncRuntime, transport: HostTransport, now: () => number = Date.now): Executor<'func'> {
  return async (def, a) => {
    const mod = a.logic.modules?.[def.module];
    if (mod === undefined) {
      return { status: 'failed', retryable: false, error: { code: 'FLOW_UNKNOWN_MODULE', message: `module ${def.module} is not declared` } };
    }
    const key = funcKey(a.running);
    // the clock is taken once per step and generation, then always served from the record
    const record: FuncRecord = a.instance.ctx.funcs?.[key] ?? {
      clock: { nowMs: now(), seed: Math.floor(unitHash(`${a.instance.id}:${key}`) * 2 ** 31) },
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
    // the lease was lost while the module ran: make no call that nobody would record
    if (a.signal?.aborted) {
      return { status: 'failed', retryable: true, error: { code: 'ABORTED', message: `host call ${importName} not made: ${String(a.signal.reason)}` } };
    }
    const target = mod.imports[importName]!;
    const outcome = await transport({ target, importName, n, request, idempotencyKey: keys.hostCall(a.running.idempotencyKey, n), attempt: a });
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

/** Host calls as proxy-back HTTP calls to the import's handler profile. */
export function httpHostTransport(handlers: HandlerProfiles): HostTransport {
  return async ({ target, request, idempotencyKey, attempt }) => {
    const profile = resolveHandler(handlers, target.handler ?? attempt.instance.domain);
    return callHttp({
      method: target.method ?? 'POST',
      url: profile.url.replace(/\/$/, '') + target.path,
      headers: { ...attempt.headers, 'idempotency-key': idempotencyKey, ...authorizationFor(profile, attempt.instance.env) },
      body: request,
      timeoutMs: attempt.timeoutMs,
      signal: attempt.signal,
    });
  };
}
