import {
  type Attributes,
  type Context,
  context,
  isSpanContextValid,
  ROOT_CONTEXT,
  type Span,
  type SpanContext,
  SpanStatusCode,
  type Tracer,
  type TracerProvider,
  trace,
} from '@opentelemetry/api';

/**
 * The engine's spans, through `@opentelemetry/api` only: with no SDK registered (the default;
 * `s8flow start` registers one when OTEL_* asks for it) every span is the API's no-op and costs a
 * few object allocations. An instance is one trace: its start span's W3C traceparent is kept with
 * it (migration 0032) and every later span, on any node, is parented to it (`instanceContext`).
 *
 * Span names are few and fixed; what varies (step, attempt, env) is in attributes:
 * flow.start, flow.queue_wait, flow.attempt, flow.compensation, flow.module_run, flow.host_call,
 * flow.timer, flow.decision.wait, flow.decision.answer, and the HTTP client span (`POST`, …).
 */
export function tracer(): Tracer {
  // the API's proxy tracer keeps the first SDK tracer it finds for good, even once that SDK is shut
  // down and unregistered: a new one is taken whenever the global provider changes
  const provider = trace.getTracerProvider();
  if (provider !== current.provider) current = { provider, tracer: provider.getTracer('sentin8-flow') };
  return current.tracer;
}
let current: { provider: TracerProvider | null; tracer: Tracer } = { provider: null, tracer: trace.getTracer('sentin8-flow') };

/** Attribute names the engine's spans carry. */
export const ATTR = {
  env: 'flow.env',
  logicId: 'flow.logic_id',
  version: 'flow.version',
  workflowId: 'flow.workflow_id',
  step: 'flow.step',
  attempt: 'flow.attempt',
  outcome: 'flow.outcome',
  errorCode: 'flow.error.code',
  retryable: 'flow.retryable',
} as const;

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** A W3C traceparent header's span context, or null when it is absent or malformed (then ignored, as the spec says). */
export function parseTraceParent(header: string | null | undefined): SpanContext | null {
  if (typeof header !== 'string') return null;
  const m = TRACEPARENT.exec(header.trim().toLowerCase());
  if (m === null || m[1] === 'ff') return null;
  const sc: SpanContext = { traceId: m[2]!, spanId: m[3]!, traceFlags: Number.parseInt(m[4]!, 16) & 1, isRemote: true };
  return isSpanContextValid(sc) ? sc : null;
}

/** The W3C traceparent of a span, or null for a span that belongs to no trace (tracing off). */
export function traceParentOf(span: Span): string | null {
  const sc = span.spanContext();
  if (!isSpanContextValid(sc)) return null;
  return `00-${sc.traceId}-${sc.spanId}-0${sc.traceFlags & 1}`;
}

/** A context whose parent is the span named by `traceParent` (an instance's start span); the root context without one. */
export function contextOf(traceParent: string | null | undefined): Context {
  const sc = parseTraceParent(traceParent);
  return sc === null ? ROOT_CONTEXT : trace.setSpanContext(ROOT_CONTEXT, sc);
}

/** The caller's context from its request headers (`traceparent`), for a start or a decision. */
export function callerContext(headers: Record<string, string | string[] | undefined>): Context {
  const h = headers['traceparent'];
  return contextOf(Array.isArray(h) ? h[0] : h);
}

/** The caller's span context (given, or active now), to link a span that continues an instance to it; null when there is none. */
export function callerOf(given?: Context): SpanContext | null {
  const sc = trace.getSpanContext(given ?? context.active());
  return sc !== undefined && isSpanContextValid(sc) ? sc : null;
}

/** The attributes naming an instance, set only on spans that record (an instance's fields are read once). */
export function instanceAttributes(i: { env: string; logicId: string; version: number; id: string }): Attributes {
  return { [ATTR.env]: i.env, [ATTR.logicId]: i.logicId, [ATTR.version]: i.version, [ATTR.workflowId]: i.id };
}

/** Ends a span with what the work it covered came to: a failure marks it an error, with its code. */
export function endWith(span: Span, outcome: { status: string; error?: { code: string; message: string }; retryable?: boolean }): void {
  if (span.isRecording()) {
    span.setAttribute(ATTR.outcome, outcome.status);
    if (outcome.error !== undefined) {
      span.setAttribute(ATTR.errorCode, outcome.error.code);
      if (outcome.retryable !== undefined) span.setAttribute(ATTR.retryable, outcome.retryable);
      span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.error.message });
    }
  }
  span.end();
}

/** Ends a span on an exception thrown by the work it covered. */
export function endThrown(span: Span, err: unknown): void {
  if (span.isRecording()) {
    span.recordException(err as Error);
    span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message ?? String(err) });
  }
  span.end();
}
