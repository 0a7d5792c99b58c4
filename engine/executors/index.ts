import type { Context } from '@opentelemetry/api';
import type { Action, LogicVersion, StepDef, StepOutcome } from '../../contracts/index.ts';
import type { FuncRuntime } from '../../host-functions/index.ts';
import { funcExecutor, httpHostTransport } from './func.ts';
import type { FuncRecord, Instance, JsonValue, Running } from '../core/instance.ts';
import type { Resolve } from './allowlist.ts';
import type { HandlerProfiles } from './handlers.ts';
import { httpExecutor } from './http.ts';
import { Identities } from './m2m/identities.ts';
import { proxyExecutor } from './proxy.ts';

/** The kinds of step (and compensation) that call out of the engine. */
export type EffectKind = 'proxy' | 'http' | 'func';
export type EffectDef<K extends EffectKind = EffectKind> = Extract<StepDef | Action, { kind: K }>;

/** Everything an executor needs for one attempt; headers already carry the contract's X-Flow-* set. */
export interface Attempt {
  logic: LogicVersion;
  instance: Instance;
  running: Running;
  input: JsonValue;
  headers: Record<string, string>;
  timeoutMs: number;
  /** Aborted when the worker lost the instance's lease: drop the call, nobody will commit its answer. */
  signal?: AbortSignal;
  /**
   * Aborted when the engine stops: work without effects (a module run) is abandoned, so a module
   * that spins does not hold the stop up; calls already out are let finish.
   */
  halt?: AbortSignal;
  /**
   * The attempt span's trace context (engine/tracing.ts): the executor's spans (module run, host
   * calls, HTTP client) are its children, and a call sends `traceparent`. Absent when untraced.
   */
  trace?: Context;
}

/** A step outcome, or (func steps) a host call made that must be recorded before running on. */
export type EffectResult = StepOutcome | { status: 'progress'; record: FuncRecord };
/** What an attempt's work without effects needs, ahead of its turn: no headers, no lease signal yet. */
export type EarlyAttempt = Pick<Attempt, 'logic' | 'instance' | 'running' | 'input' | 'timeoutMs'>;
export type Executor<K extends EffectKind> = ((def: EffectDef<K>, attempt: Attempt) => Promise<EffectResult>) & {
  /**
   * Starts the part of an attempt that has no effects (a func step's module run) before the
   * attempt may run — while the commit that prepared it is still in flight — so the executor,
   * called for the same instance once that commit has landed, finds it done or under way.
   * Nothing it starts may reach outside the engine. A start nobody takes up is dropped.
   */
  ahead?: (def: EffectDef<K>, attempt: EarlyAttempt) => void;
};
export type Executors = { [K in EffectKind]: Executor<K> };

export interface ExecutorOptions {
  /** Handler profiles for proxy-back steps (`loadHandlerProfiles` reads them from the environment). (Default: none) */
  handlers?: HandlerProfiles;
  /**
   * The handlers' machine identities (OAuth tokens, client certificates, registrations); the
   * Engine makes one over its store. (Default: one over `handlers` that keeps no registration)
   */
  identities?: Identities;
  /** Hosts (`host` or `host:port`) that `http` steps may call; `*` allows any. (Default: none) */
  httpAllowlist?: readonly string[];
  /** How `http` steps resolve an allowlisted hostname before its address is checked; tests inject one. (Default: dns.lookup) */
  resolve?: Resolve;
  /** Runs `func` steps' modules; without it a func step fails with FLOW_FUNC_UNAVAILABLE. */
  funcRuntime?: FuncRuntime;
  /** Replaces the executor of `func` steps altogether (in-process services in tests). */
  func?: Executor<'func'>;
  /**
   * The most bytes of a response body read (proxy, http and host calls); past it a 2xx fails the
   * attempt FLOW_RESULT_TOO_LARGE. The Engine sets its `maxInputBytes`. (Default: 1 MiB)
   */
  maxBodyBytes?: number;
}

export function createExecutors(opts: ExecutorOptions = {}): Executors {
  const handlers = opts.handlers ?? new Map();
  const identities = opts.identities ?? new Identities(handlers);
  return {
    proxy: proxyExecutor(handlers, identities, opts.maxBodyBytes),
    http: httpExecutor(opts.httpAllowlist ?? [], opts.resolve, opts.maxBodyBytes),
    func: opts.func
      ? opts.func
      : opts.funcRuntime
      ? funcExecutor(opts.funcRuntime, httpHostTransport(handlers, identities, opts.maxBodyBytes))
      : async () => ({
        status: 'failed',
        retryable: false,
        error: { code: 'FLOW_FUNC_UNAVAILABLE', message: 'this engine was started without a module runtime for func steps' },
      }),
  };
}

/** The outbound headers (ARCHITECTURE.md, Contracts: outbound calls) for one attempt. */
export function flowHeaders(instance: Instance, running: Running): Record<string, string> {
  const headers: Record<string, string> = {
    'idempotency-key': running.idempotencyKey,
    'x-flow-workflow-id': instance.id,
    'x-flow-env': instance.env,
    'x-flow-step': running.step,
    'x-flow-attempt': String(running.attempt),
  };
  if (instance.ctx.approvedBy !== null) headers['x-flow-approved-by'] = instance.ctx.approvedBy.subject;
  return headers;
}

export { type HandlerProfiles, loadHandlerProfiles } from './handlers.ts';
export { Identities, type IdentityOptions } from './m2m/identities.ts';
export type { RegistrationStore } from './m2m/registration.ts';
