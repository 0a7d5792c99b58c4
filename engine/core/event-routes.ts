import type { LogicVersion, MessageTrigger, StartTrigger } from '../../contracts/index.ts';
import { attributeOf } from './attributes.ts';
import { evaluateIn } from './expressions.ts';
import type { JsonValue } from './instance.ts';
import { schemaProblems } from './schemas.ts';
import { storableProblem } from './storable.ts';
import { messageRefusal } from './wake.ts';

/** The event a message trigger routes, as its expressions see it (`event` in `match` and `payload`). */
export interface RoutedEvent {
  type: string;
  payload: JsonValue;
  idempotencyKey: string;
}

/** Which live instances of the version a route reaches: by correlationId, or by one typed search attribute. */
export type RouteMatch = { correlationId: string } | { attribute: string; type: 'string' | 'number' | 'time'; value: string | number };

/** One message trigger of a version, evaluated for one event: what to deliver, and to whom. */
export interface PlannedRoute {
  message: string;
  payload: JsonValue;
  /** Null: the match evaluated to null (the event names no instance), so it reaches none. */
  match: RouteMatch | null;
  /** The message's Idempotency-Key in each instance it reaches: a redelivered event is a duplicate there. */
  key: string;
}

/** The message key of an event's delivery: derived from the event's key, so a second delivery of the event is a duplicate. */
export const routeKey = (eventKey: string, message: string) => `event:${eventKey}:${message}`;

/** The most live instances one message trigger may reach with one event unless FLOW_TRIGGER_REACH_MAX says otherwise (the engine delivers to all of them in one transaction). */
export const DEFAULT_MAX_ROUTED_INSTANCES = 1000;

/** Why a route that selects `count` live instances refuses its event, or null when it may deliver to them all. */
export function routeLimitProblem(count: number, most = DEFAULT_MAX_ROUTED_INSTANCES): string | null {
  return count > most ? `its match selects more than ${most} live instances; one event reaches at most that many (FLOW_TRIGGER_REACH_MAX), so narrow the match` : null;
}

/** The version's trigger that starts an instance on events of `type`: its first on the type that delivers no message. */
export function startTriggerOn(logic: LogicVersion, type: string): StartTrigger | undefined {
  for (const t of logic.triggers ?? []) if (t.event === type && !('message' in t)) return t;
  return undefined;
}

/**
 * The input a start trigger gives the instance it starts for `event`: its expression over
 * `{ event }`, checked against the version's input schema. A failed expression or an input the
 * schema refuses refuses the event (FLOW_TRIGGER_INPUT_INVALID): the problems say why.
 */
export async function planStart(logic: LogicVersion, trigger: StartTrigger, event: RoutedEvent): Promise<{ input: JsonValue } | { problems: string[] }> {
  let input: JsonValue;
  try {
    input = await evaluateIn('trigger.input', trigger.input, { event: { type: event.type, payload: event.payload, idempotencyKey: event.idempotencyKey } });
  } catch (err) {
    return { problems: [`trigger input expression failed: ${(err as Error).message}`] };
  }
  const problems = schemaProblems(logic.input, input);
  return problems.length > 0 ? { problems } : { input };
}

/** The version's triggers that deliver events of `type` as messages, in declaration order. */
export function messageTriggersOn(logic: LogicVersion, type: string): MessageTrigger[] {
  return (logic.triggers ?? []).flatMap((t) => ('message' in t && t.event === type ? [t] : []));
}

/**
 * Evaluates the version's message triggers on `event` (docs/messages.md, "From an event"): each
 * one's match value, typed as the store compares it, and its payload (the event's payload unless
 * the trigger builds one), checked against the schema of the waitFor step that takes it. Decided
 * here once, before any instance is touched: a payload the step would refuse refuses the event,
 * not one instance at a time; so does a payload or match value that cannot be stored (over
 * `maxBytes`, a NUL). Returns the planned routes, or the problems that refuse the event.
 */
export async function planRoutes(logic: LogicVersion, event: RoutedEvent, maxBytes: number): Promise<{ routes: PlannedRoute[]; problems: string[] }> {
  const routes: PlannedRoute[] = [];
  const problems: string[] = [];
  const context = { event: { type: event.type, payload: event.payload, idempotencyKey: event.idempotencyKey } };
  for (const t of messageTriggersOn(logic, event.type)) {
    try {
      const payload = t.payload === undefined ? event.payload : await evaluateIn('trigger.payload', t.payload, context);
      const refusal = messageRefusal(logic, t.message, payload);
      if (refusal !== null) {
        problems.push(`[${refusal.code}] ${refusal.message}`);
        continue;
      }
      const match = await matchOf(logic, t, context);
      // what an expression built goes into jsonb and text parameters: no NUL, no lone surrogate, not over the cap
      const unstorable = storableProblem({ payload, match }, maxBytes);
      if (unstorable !== null) {
        problems.push(unstorable.kind === 'too_large' ? `the message is ${unstorable.bytes} bytes of JSON, over ${unstorable.max}` : `the ${unstorable.path.replace(/^\$\./, '')} it built ${unstorable.why}`);
        continue;
      }
      routes.push({ message: t.message, payload, match, key: routeKey(event.idempotencyKey, t.message) });
    } catch (err) {
      problems.push(`${(err as { code?: string }).code === undefined ? '' : `[${(err as { code: string }).code}] `}${(err as Error).message}`);
    }
  }
  return { routes, problems };
}

async function matchOf(logic: LogicVersion, t: MessageTrigger, context: Record<string, JsonValue>): Promise<RouteMatch | null> {
  if ('correlationId' in t.match) {
    const value = await evaluateIn('trigger.match.correlationId', t.match.correlationId, context);
    if (value === null) return null;
    // a correlationId is text; a numeric business id is compared as the caller wrote it at start
    if (typeof value === 'string' || (typeof value === 'number' && Number.isFinite(value))) return { correlationId: String(value) };
    throw new Error(`match.correlationId gave a ${Array.isArray(value) ? 'array' : typeof value}; it must give a string, a number or null`);
  }
  const value = await evaluateIn('trigger.match.value', t.match.value, context);
  // typed as attributes are stored (core/attributes.ts), so a number meets a number, an instant an instant
  const typed = attributeOf(t.match.attribute, logic.attributes?.[t.match.attribute]?.type, value);
  return typed === null ? null : { attribute: t.match.attribute, ...typed };
}
