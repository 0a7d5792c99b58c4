import type { Context } from '@opentelemetry/api';
import { z } from 'zod';
import { grantInForce, mayConsumeEvent } from '../../contracts/grants.ts';
import { Json } from '../../contracts/index.ts';
import { Refused } from '../core/errors.ts';
import { messageTriggersOn, planRoutes, planStart, routeLimitProblem, startTriggerOn } from '../core/event-routes.ts';
import type { JsonValue } from '../core/instance.ts';
import { EventKeyReused, TriggerInputInvalid, TriggerRouteInvalid } from '../errors.ts';
import { correlatedInstances, versionsTriggeredBy } from '../store/correlated-instances.ts';
import { type EventDelivery, recordEvent, setEventOutcome, triggeredLogicIds } from '../store/events.ts';
import { NotFound } from '../store/errors.ts';
import { findStartableVersion } from '../store/find-startable-version.ts';
import type { Client } from '../store/tx.ts';
import type { LogicCache } from './logic-cache.ts';
import type { CommittedMessage, Messages } from './messages.ts';
import { startPinned } from './start-instance.ts';

export const IngestEventRequest = z.strictObject({
  type: z.string().min(1).max(200),
  /** The same key in the env never starts anything a second time. */
  idempotencyKey: z.string().min(1).max(200),
  env: z.string().min(1).max(64).optional(),
  payload: Json.optional(),
});
export type IngestEventRequest = z.infer<typeof IngestEventRequest>;

export interface IngestResult {
  /** The instances the event started: on a repeat of its key, the ones the first delivery started. */
  ids: string[];
  /** False when the key was already recorded (nothing new was started). */
  created: boolean;
  /**
   * The messages its message triggers delivered, one per instance reached (docs/messages.md, "From
   * an event"): on a repeat of its key, what the first delivery did.
   */
  delivered: EventDelivery[];
  /**
   * False when the event started nothing and reached no instance: it is recorded, and nothing
   * happened (a typo in the type, a version not yet published, or no instance matched).
   */
  matched: boolean;
}

export interface IngestDeps {
  logics: LogicCache;
  messages: Messages;
  /** The cap on what a message trigger builds (FLOW_MAX_INPUT_BYTES). */
  maxInputBytes: number;
  /** The most live instances one message trigger reaches with one event (FLOW_TRIGGER_REACH_MAX). */
  maxRoutedInstances: number;
}

/** Instance idempotency key of a trigger start: one instance per (event, logicId), whatever the retries. */
export const triggerKey = (eventKey: string, logicId: string) => `event:${eventKey}:${logicId}`;

/**
 * Records the event, starts one instance per start trigger on its type, each of the version active
 * now (the highest active one, pinned to it), with input = the trigger's expression over `{ event }`,
 * and delivers it as a message through each message trigger on its type to the live instances it
 * matches — all in the caller's env-scoped transaction, so either the event, every start and every
 * delivery commit, or none does. A registered trigger whose version no longer declares it does
 * nothing, and neither does one its version's publisher may not consume (contracts/grants.ts).
 * `committed` lists the deliveries that moved an instance, to be told once the caller commits.
 */
export async function ingestEvent(
  c: Client,
  deps: IngestDeps,
  env: string,
  e: IngestEventRequest,
  traceContext?: Context,
): Promise<IngestResult & { committed: CommittedMessage[] }> {
  const payload = (e.payload ?? null) as JsonValue;
  const seen = await recordEvent(c, env, { type: e.type, idempotencyKey: e.idempotencyKey, payload });
  if (seen !== null) {
    if (seen.type !== e.type || !seen.samePayload) throw new EventKeyReused(e.idempotencyKey);
    return { ids: seen.started, delivered: seen.delivered, created: false, matched: seen.started.length + seen.delivered.length > 0, committed: [] };
  }
  const ids: string[] = [];
  const delivered: EventDelivery[] = [];
  const committed: CommittedMessage[] = [];
  for (const logicId of await triggeredLogicIds(c, e.type)) {
    ids.push(...(await startOn(c, deps.logics, env, logicId, e, payload, traceContext)));
    const routed = await routeTo(c, deps, env, logicId, e, payload);
    delivered.push(...routed.delivered);
    committed.push(...routed.committed);
  }
  await setEventOutcome(c, e.idempotencyKey, ids, delivered);
  // each matching start trigger starts exactly one instance or refuses the whole event
  return { ids, delivered, created: true, matched: ids.length + delivered.length > 0, committed };
}

/** The start trigger of the active version of `logicId` on the event's type: the instance it started, if any. */
async function startOn(c: Client, logics: LogicCache, env: string, logicId: string, e: IngestEventRequest, payload: JsonValue, traceContext?: Context): Promise<string[]> {
  // a retired (drained) version starts nothing, not even from an event
  const found = await findStartableVersion(c, logicId);
  const logic = found?.active ? found.doc : undefined;
  const trigger = logic === undefined ? undefined : startTriggerOn(logic, e.type);
  if (logic === undefined || trigger === undefined) return [];
  // nor does one whose publisher holds no flow:events for the type (a version recorded before
  // grants were: until it is re-vouched for) — its trigger would hand it another team's events
  if (!mayConsumeEvent(grantInForce(logic.logicId, found!.grants), e.type)) return [];
  const planned = await planStart(logic, trigger, { type: e.type, payload, idempotencyKey: e.idempotencyKey });
  if ('problems' in planned) throw new TriggerInputInvalid(e.type, `${logic.logicId}@${logic.version}`, planned.problems);
  const started = await startPinned(c, logics, logic, {
    env,
    input: planned.input,
    correlationId: null,
    idempotencyKey: triggerKey(e.idempotencyKey, logicId),
    callbackUrl: null,
    ...(traceContext === undefined ? {} : { traceContext }),
  });
  return [started.id];
}

/**
 * The message triggers of every version of `logicId` on the event's type (a retired version's
 * instances still wait for their messages): the core plans each version's routes, then each
 * instance the match selects gets the message by the one delivery rule, under a key derived from
 * the event's. A version whose publisher may not consume the type reaches no instance. A refusal
 * of one instance (its buffer full, or it ended since it was found) is recorded and the rest go on.
 */
async function routeTo(
  c: Client,
  { messages, maxInputBytes, maxRoutedInstances: most }: IngestDeps,
  env: string,
  logicId: string,
  e: IngestEventRequest,
  payload: JsonValue,
): Promise<{ delivered: EventDelivery[]; committed: CommittedMessage[] }> {
  const delivered: EventDelivery[] = [];
  const committed: CommittedMessage[] = [];
  for (const { doc: logic, grants } of await versionsTriggeredBy(c, logicId, e.type)) {
    if (messageTriggersOn(logic, e.type).length === 0) continue;
    if (!mayConsumeEvent(grantInForce(logic.logicId, grants), e.type)) continue;
    const label = `${logic.logicId}@${logic.version}`;
    const { routes, problems } = await planRoutes(logic, { type: e.type, payload, idempotencyKey: e.idempotencyKey }, maxInputBytes);
    if (problems.length > 0) throw new TriggerRouteInvalid(e.type, label, problems);
    for (const route of routes) {
      if (route.match === null) continue;
      const ids = await correlatedInstances(c, { logicId, version: logic.version, match: route.match, limit: most + 1 });
      const tooMany = routeLimitProblem(ids.length, most);
      if (tooMany !== null) throw new TriggerRouteInvalid(e.type, label, [tooMany]);
      for (const id of ids) {
        const m = { name: route.message, payload: route.payload, key: route.key, sender: { subject: `event:${e.type}` } };
        try {
          // authorised by the trigger: its version's publisher holds flow:events for the type
          const done = await messages.deliverIn(c, env, id, m, () => {});
          const status = (done.answer.body as { status: 'delivered' | 'buffered' }).status;
          delivered.push({ workflowId: id, message: route.message, status });
          if (done.committed !== null) committed.push(done.committed);
        } catch (err) {
          // the core refuses before anything is written, so the transaction goes on
          if (!(err instanceof Refused) && !(err instanceof NotFound)) throw err;
          delivered.push({ workflowId: id, message: route.message, status: 'refused', code: err.code });
        }
      }
    }
  }
  return { delivered, committed };
}
