import { type Context, trace } from '@opentelemetry/api';
import type { LogicVersion, StepOutcome, Target } from '../../contracts/index.ts';
import type { FuncRunResult, FuncRuntime } from '../../host-functions/index.ts';
import { RETRYABLE_FUNC_CODES } from '../../host-functions/index.ts';
import { type FuncRecord, funcKey, type JsonValue } from '../core/instance.ts';
import { keys, unitHash } from '../core/retry.ts';
import { endThrown, endWith, tracer } from '../tracing.ts';
import { callHandler } from './handler-call.ts';
import type { HandlerProfiles } from './handlers.ts';
import type { Attempt, EarlyAttempt, EffectDef, Executor } from './index.ts';
import type { Identities } from './m2m/identities.ts';

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
 *
 * The module run itself has no effects, so `ahead` may start it while the commit that prepared
 * the attempt is in flight, once that commit has been sent (a run may hold this thread); the attempt then takes that run (and the record it ran against) for
 * its instance. The host call, an effect, is made only by the attempt, after that commit.
 */
export function funcExecutor(runtime: FuncRuntime, transport: HostTransport, now: () => number = Date.now): Executor<'func'> {
  /** Module runs started ahead, by the instance (one transition's state) they were started for. */
  const early = new WeakMap<object, ModuleRun>();

  /** `later`: start the run once this turn's I/O has gone out (the commit it overlaps first). */
  const start = (def: EffectDef<'func'>, a: EarlyAttempt, later = false): ModuleRun | StepOutcome => {
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
    // aborted when the attempt's lease is lost or the engine halts (execute links it): the run is
    // abandoned and its worker stopped, so a cancelled spinner does not hold a worker
    const abandon = new AbortController();
    const run = () =>
      runtime.run({
        moduleHash: mod.sha256,
        exportName: def.export ?? 'run',
        input: a.input,
        declaredImports: Object.keys(mod.imports),
        recorded: record.calls,
        clock: record.clock,
        timeoutMs: a.timeoutMs,
        queue: a.instance.env,
        signal: abandon.signal,
      });
    const result = later ? new Promise<FuncRunResult>((resolve) => setImmediate(() => resolve(run()))) : run();
    return { mod, record, result, abandon };
  };

  const execute: Executor<'func'> = async (def, a) => {
    const taken = early.get(a.instance);
    early.delete(a.instance);
    const run = taken ?? start(def, a);
    if ('status' in run) return run;
    const { mod, record } = run;
    const moduleRun = () => abandonedWith(run, [a.signal, a.halt]);
    const result = await traced(a.trace, 'flow.module_run', { 'flow.module': def.module, 'flow.host_calls.recorded': record.calls.length }, moduleRun);
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
    // the call's HTTP client span is the host call span's child
    const call = (trace?: Context) => transport({ target, importName, n, request, idempotencyKey: keys.hostCall(a.running.idempotencyKey, n), attempt: { ...a, trace } });
    const outcome = await traced(a.trace, 'flow.host_call', { 'flow.host_call.import': importName, 'flow.host_call.n': n }, call);
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
  execute.ahead = (def, a) => {
    // a run may hold this thread (inline-runner.ts): let the commit it overlaps be sent first
    const run = start(def, a, true);
    if ('status' in run) return;
    // a run nobody takes up (its commit was fenced) must not end in an unhandled rejection
    run.result.catch(() => {});
    early.set(a.instance, run);
  };
  return execute;
}

/**
 * Runs `work` under a span, child of the attempt's (`parent`), giving it the span's context (a
 * host call's HTTP client span is its child); untraced without a parent. The module run's span
 * covers the wait for its result: a run started ahead of the attempt began earlier.
 */
async function traced<T extends { status: string; error?: { code: string; message: string } | undefined }>(
  parent: Context | undefined,
  name: string,
  attributes: Record<string, string | number>,
  work: (trace?: Context) => Promise<T>,
): Promise<T> {
  if (parent === undefined) return work();
  const span = tracer().startSpan(name, { attributes }, parent);
  try {
    const out = await work(trace.setSpan(parent, span));
    endWith(span, out);
    return out;
  } catch (err) {
    endThrown(span, err);
    throw err;
  }
}

/** A module run under way, with the module and the record it runs against. */
interface ModuleRun {
  mod: NonNullable<LogicVersion['modules']>[string];
  record: FuncRecord;
  result: Promise<FuncRunResult>;
  abandon: AbortController;
}

/** The run's result, its run abandoned as soon as one of `signals` aborts (or has). */
async function abandonedWith(run: ModuleRun, signals: (AbortSignal | undefined)[]): Promise<FuncRunResult> {
  const stop = () => run.abandon.abort();
  const given = signals.filter((s): s is AbortSignal => s !== undefined);
  for (const s of given) {
    if (s.aborted) stop();
    else s.addEventListener('abort', stop, { once: true });
  }
  try {
    return await run.result;
  } finally {
    for (const s of given) s.removeEventListener('abort', stop);
  }
}

/** Host calls as proxy-back HTTP calls to the import's handler profile. */
export function httpHostTransport(handlers: HandlerProfiles, identities: Identities, maxBodyBytes?: number): HostTransport {
  return async ({ target, request, idempotencyKey, attempt }) =>
    callHandler(handlers, identities, {
      handler: target.handler ?? attempt.instance.domain,
      env: attempt.instance.env,
      method: target.method ?? 'POST',
      path: target.path,
      headers: { ...attempt.headers, 'idempotency-key': idempotencyKey },
      body: request,
      timeoutMs: attempt.timeoutMs,
      signal: attempt.signal,
      trace: attempt.trace,
      maxBodyBytes,
    });
}
