import { type Context, type Link, ROOT_CONTEXT, SpanKind, trace } from '@opentelemetry/api';
import type { TraceEvent } from '../core/journal.ts';
import type { Instance } from '../core/instance.ts';
import type { EffectResult } from '../executors/index.ts';
import type { Stored } from '../store/rows.ts';
import { ATTR, callerOf, contextOf, endThrown, endWith, instanceAttributes, tracer } from '../tracing.ts';

/**
 * The runtime's spans of an instance (engine/tracing.ts): each is parented to the instance's
 * start span, read from the row the worker claimed or the verb locked, so attempts on any node
 * and after any wait land in one trace. Every helper is a few allocations when tracing is off.
 */

/** The context an instance's spans are parented to: its start span's, or a trace of their own when it was started untraced. */
export function instanceContext(stored: Pick<Stored, 'traceParent'>): Context {
  return contextOf(stored.traceParent);
}

function stepAttributes(i: Instance) {
  return { ...instanceAttributes(i), [ATTR.step]: i.ctx.running?.step ?? i.currentStep ?? '' };
}

/**
 * flow.queue_wait: from the moment a claimed instance became runnable (run_at: started, handed
 * over, a retry's backoff over) to its claim, now. Only for instances claimed runnable (the claim
 * made a pending one `processing`); a woken waiting one gets its flow.timer span instead. An
 * instance taken over from a holder that died counts its whole wait since run_at.
 */
export function traceQueueWait(root: Context, stored: Stored): void {
  const { instance, timing } = stored;
  if (timing === undefined || instance.state === 'waiting') return;
  const now = Date.now();
  // run_at is the database's clock: a skew never puts the start after the claim
  const span = tracer().startSpan('flow.queue_wait', { startTime: Math.min(timing.runAt.getTime(), now) }, root);
  if (span.isRecording()) span.setAttributes(stepAttributes(instance));
  span.end(now);
}

/**
 * flow.attempt (or flow.compensation): one attempt of the instance's prepared step or
 * compensation; `run` gets its context, so the executor's own spans (module run, host calls, the
 * HTTP client span that sends `traceparent`) are its children. An attempt that is one HTTP call
 * (`oneCall`: a proxy or http step) is that call's CLIENT span itself, with its HTTP attributes.
 */
export async function traceAttempt(root: Context, instance: Instance, run: (trace?: Context) => Promise<EffectResult>, oneCall = false): Promise<EffectResult> {
  const running = instance.ctx.running;
  const name = running?.kind === 'compensation' ? 'flow.compensation' : 'flow.attempt';
  const span = tracer().startSpan(name, { kind: oneCall ? SpanKind.CLIENT : SpanKind.INTERNAL }, root);
  if (span.isRecording() && running !== null) {
    span.setAttributes({ ...stepAttributes(instance), [ATTR.attempt]: running.attempt, 'flow.generation': running.generation });
  }
  try {
    // the context is passed down, never made active: an active context costs every promise of the
    // process an async hook (AsyncLocalStorage on Node 20). Untraced (no SDK, and an instance
    // started untraced), there is none to pass.
    const result = await run(span.isRecording() || root !== ROOT_CONTEXT ? trace.setSpan(root, span) : undefined);
    endWith(span, result);
    return result;
  } catch (err) {
    endThrown(span, err);
    throw err;
  }
}

/** flow.timer: a woken instance's fired timers applied (a delay over, a deadline passed); children's fan-in is not a timer. */
export async function traceWakes<T extends { event: TraceEvent } | null>(root: Context, stored: Stored, apply: () => Promise<T>): Promise<T> {
  const purposes = stored.wakes.filter((w) => w.purpose !== 'children').map((w) => w.purpose);
  if (purposes.length === 0) return apply();
  const span = tracer().startSpan('flow.timer', undefined, root);
  if (span.isRecording()) span.setAttributes({ ...stepAttributes(stored.instance), 'flow.timer.purposes': purposes });
  try {
    const applied = await apply();
    const event = applied?.event;
    endWith(span, { status: event?.type === 'timer' ? event.purpose : 'stale' });
    return applied;
  } catch (err) {
    endThrown(span, err);
    throw err;
  }
}

/**
 * The spans of an event from outside the worker loop, once committed: a decision answered gives
 * flow.decision.wait (from when the instance parked to now) and flow.decision.answer; a service's
 * completion of a parked step gives flow.callback. Both continue the instance's trace and link
 * to the caller's span (its `traceparent`), the request that resumed it.
 */
export function traceResume(stored: Stored, event: TraceEvent, callerContext?: Context): void {
  if (event.type !== 'resume' && event.type !== 'callback') return;
  const root = instanceContext(stored);
  const now = Date.now();
  const caller = callerOf(callerContext);
  const links: Link[] = caller === null ? [] : [{ context: caller }];
  const attrs = stepAttributes(stored.instance);
  if (event.type === 'callback') {
    const span = tracer().startSpan('flow.callback', { startTime: now, links }, root);
    if (span.isRecording()) span.setAttributes(attrs);
    endWith(span, event.outcome);
    return;
  }
  const parkedAt = stored.timing?.updatedAt.getTime() ?? now;
  const wait = tracer().startSpan('flow.decision.wait', { startTime: Math.min(parkedAt, now) }, root);
  if (wait.isRecording()) wait.setAttributes({ ...attrs, [ATTR.step]: event.args.step });
  wait.end(now);
  const answer = tracer().startSpan('flow.decision.answer', { startTime: now, links }, root);
  if (answer.isRecording()) answer.setAttributes({ ...attrs, [ATTR.step]: event.args.step, 'flow.decision.option': event.args.option });
  answer.end();
}
