import { randomUUID } from 'node:crypto';
import { type Context, context } from '@opentelemetry/api';
import { canonicalJson, type LogicVersion, sha256Hex, type WorkflowRecord } from '../../contracts/index.ts';
import { begin } from '../core/flow.ts';
import { createInstance, type Instance, type JsonValue } from '../core/instance.ts';
import { schemaProblems } from '../core/schemas.ts';
import { IdempotencyMismatch, InputInvalid } from '../errors.ts';
import type { Db } from '../store/db.ts';
import { insertWorkflow, type StartKey, type StartPin } from '../store/insert-workflow.ts';
import type { Stored } from '../store/rows.ts';
import type { Client } from '../store/tx.ts';
import { endThrown, instanceAttributes, traceParentOf, tracer } from '../tracing.ts';
import type { LogicCache } from './logic-cache.ts';

export interface StartSpec {
  env: string;
  input: unknown;
  correlationId: string | null;
  /**
   * The same key for the same definition in the env returns the first instance instead of
   * starting another, when the request is the same; with a different request it is refused
   * (FLOW_IDEMPOTENCY_MISMATCH). Keys of different logicIds never meet.
   */
  idempotencyKey: string | null;
  /** The version the request asked for (null: the active one), part of what the key stands for. (Default: null) */
  requestedVersion?: number | null;
  /** Terminal-state notifications go here (a `callback` outbox row per terminal transition). */
  callbackUrl: string | null;
  /** The caller's trace context, the start span's parent. (Default: the context active now) */
  traceContext?: Context;
  /** Claims take an env's instances of higher priority first. (Default: the definition's `priority`, else 0) */
  priority?: number;
  /** A lease from the starting engine's pool: an instance due now is inserted with it, to be driven without a claim. */
  lease?: { token: string; leaseMs: number } | null;
  /** How the version was found: the insert checks it still would be, and needs no transaction of the caller's. */
  pin?: StartPin;
  /** With a `pin`: answer the instance's WorkflowRecord, read in the start's statement. */
  withRecord?: boolean;
  /** The caller tells the claim loops of the instance once it is committed (see StartKey). (Default: false) */
  announced?: boolean;
  /** With a `pin`: how its statement is sent (see StartKey). */
  send?: StartKey['send'];
}

export interface Started {
  id: string;
  created: boolean;
  leased: Stored | null;
  /** Created runnable and not leased: a claim must take it (the caller announces it, when `announced`). */
  claimable: boolean;
  /** The instance's WorkflowRecord, when the spec asked for it (`withRecord`). */
  record: WorkflowRecord | null;
}

/**
 * Starts an instance of `logic` (the version it is pinned to for life) inside the caller's
 * env-scoped transaction: checks the input, enters the first step and inserts the instance with
 * its first transition. Shared by API starts and event triggers. With a `spec.pin`, `on` may be
 * the Db (the start is then a statement of its own), and null means the version to start has
 * changed since it was found: nothing was started.
 */
export async function startPinned(on: Client, logics: LogicCache, logic: LogicVersion, spec: StartSpec): Promise<Started>;
export async function startPinned(on: Client | Db, logics: LogicCache, logic: LogicVersion, spec: StartSpec & { pin: StartPin }): Promise<Started | null>;
export async function startPinned(on: Client | Db, logics: LogicCache, logic: LogicVersion, spec: StartSpec): Promise<Started | null> {
  // the instance's trace: this span, a child of the caller's (its traceparent, made active by the
  // API, or by the caller's own SDK in process), is what every later span of the instance is
  // parented to (its traceparent is stored with the instance)
  const span = tracer().startSpan('flow.start', undefined, spec.traceContext ?? context.active());
  try {
    const problems = schemaProblems(logic.input, spec.input);
    if (problems.length > 0) throw new InputInvalid(`${logic.logicId}@${logic.version}`, problems);
    logics.remember(logic);
    const initial = newInstance(logic, spec);
    const t = await begin(logic, initial);
    const hash = spec.idempotencyKey === null ? null : startRequestHash(logic.logicId, spec);
    const traceParent = span.isRecording() ? traceParentOf(span) : null;
    const priority = spec.priority ?? logic.priority ?? 0;
    // due now, and its engine has room: leased to it at once (what a claim would do next)
    const lease = spec.lease && t.instance.state === 'pending' && t.runAfterMs === null ? spec.lease : null;
    const key = { idempotencyKey: spec.idempotencyKey, requestHash: hash, callbackUrl: spec.callbackUrl, initial, traceParent, priority, lease, announced: spec.announced ?? false };
    const started =
      spec.pin === undefined
        ? await insertWorkflow(on as Client, t, key)
        : await insertWorkflow(on, t, { ...key, pin: spec.pin, withRecord: spec.withRecord ?? false, ...(spec.send === undefined ? {} : { send: spec.send }) });
    if (started === null) {
      span.setAttribute('flow.version_changed', true);
      span.end();
      return null;
    }
    if (span.isRecording()) span.setAttributes({ ...instanceAttributes({ ...initial, id: started.id }), 'flow.created': started.created });
    // an instance started before hashes were kept (null) answers any request, as it always did
    if (!started.created && started.requestHash !== null && started.requestHash !== hash) {
      throw new IdempotencyMismatch(spec.idempotencyKey!, started.id);
    }
    span.end();
    const leased = lease === null || !started.created ? null : { instance: { ...t.instance, state: 'processing' as const }, rowVersion: 1, leaseToken: lease.token, wakes: [], traceParent };
    const claimable = started.created && leased === null && (t.instance.state === 'pending' || t.instance.state === 'compensating');
    return { id: started.id, created: started.created, leased, claimable, record: started.record };
  } catch (err) {
    endThrown(span, err);
    throw err;
  }
}

/**
 * What a start's idempotency key stands for: the sha256 of the canonical JSON of the request as
 * normalised (defaults filled in, field order irrelevant). The env is left out (keys are per
 * env and logicId), and so is the version the request resolved to: a repeat after a new version was published
 * is still the same request.
 */
export function startRequestHash(logicId: string, spec: Omit<StartSpec, 'env' | 'idempotencyKey'>): string {
  const request = {
    logicId,
    version: spec.requestedVersion ?? null,
    input: spec.input ?? null,
    correlationId: spec.correlationId,
    callbackUrl: spec.callbackUrl,
  };
  return `sha256:${sha256Hex(canonicalJson(request))}`;
}

export function newInstance(logic: LogicVersion, spec: Pick<StartSpec, 'env' | 'input' | 'correlationId'>): Instance {
  return createInstance(logic, { id: randomUUID(), env: spec.env, input: spec.input as JsonValue, correlationId: spec.correlationId });
}
