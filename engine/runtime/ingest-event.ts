import type { Context } from '@opentelemetry/api';
import { z } from 'zod';
import { grantInForce, mayConsumeEvent } from '../../contracts/grants.ts';
import { Json } from '../../contracts/index.ts';
import { evaluateIn } from '../core/expressions.ts';
import type { JsonValue } from '../core/instance.ts';
import { schemaProblems } from '../core/schemas.ts';
import { EventKeyReused, TriggerInputInvalid } from '../errors.ts';
import { recordEvent, setEventStarted, triggeredLogicIds } from '../store/events.ts';
import { findStartableVersion } from '../store/find-startable-version.ts';
import type { Client } from '../store/tx.ts';
import type { LogicCache } from './logic-cache.ts';
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
   * False when no active version has a trigger on the event's type: the event is recorded, and
   * nothing started (a typo in the type, or a version not yet published).
   */
  matched: boolean;
}

/** Instance idempotency key of a trigger start: one instance per (event, logicId), whatever the retries. */
export const triggerKey = (eventKey: string, logicId: string) => `event:${eventKey}:${logicId}`;

/**
 * Records the event and starts one instance per trigger on its type, each of the version active
 * now (the highest active one, pinned to it), with input = the trigger's expression over `{ event }` — all in the
 * caller's env-scoped transaction, so either the event and every start commit, or none does.
 * A registered trigger whose active version no longer declares it starts nothing, and neither
 * does one its version's publisher may not consume (contracts/grants.ts).
 */
export async function ingestEvent(c: Client, logics: LogicCache, env: string, e: IngestEventRequest, traceContext?: Context): Promise<IngestResult> {
  const payload = (e.payload ?? null) as JsonValue;
  const seen = await recordEvent(c, env, { type: e.type, idempotencyKey: e.idempotencyKey, payload });
  if (seen !== null) {
    if (seen.type !== e.type || !seen.samePayload) throw new EventKeyReused(e.idempotencyKey);
    return { ids: seen.started, created: false, matched: seen.started.length > 0 };
  }
  const ids: string[] = [];
  for (const logicId of await triggeredLogicIds(c, e.type)) {
    // a retired (drained) version starts nothing, not even from an event
    const found = await findStartableVersion(c, logicId);
    const logic = found?.active ? found.doc : undefined;
    const trigger = logic?.triggers?.find((t) => t.event === e.type);
    if (logic === undefined || trigger === undefined) continue;
    // nor does one whose publisher holds no flow:events for the type (a version recorded before
    // grants were: until it is re-vouched for) — its trigger would hand it another team's events
    if (!mayConsumeEvent(grantInForce(logic.logicId, found!.grants), e.type)) continue;
    const label = `${logic.logicId}@${logic.version}`;
    let input: JsonValue;
    try {
      input = await evaluateIn('trigger.input', trigger.input, { event: { type: e.type, payload, idempotencyKey: e.idempotencyKey } });
    } catch (err) {
      throw new TriggerInputInvalid(e.type, label, [`trigger input expression failed: ${(err as Error).message}`]);
    }
    const problems = schemaProblems(logic.input, input);
    if (problems.length > 0) throw new TriggerInputInvalid(e.type, label, problems);
    const started = await startPinned(c, logics, logic, {
      env,
      input,
      correlationId: null,
      idempotencyKey: triggerKey(e.idempotencyKey, logicId),
      callbackUrl: null,
      ...(traceContext === undefined ? {} : { traceContext }),
    });
    ids.push(started.id);
  }
  await setEventStarted(c, e.idempotencyKey, ids);
  // each matching trigger starts exactly one instance or refuses the whole event: matched ⇔ started
  return { ids, created: true, matched: ids.length > 0 };
}
