/**
 * A version can do no more than its publisher (ARCHITECTURE.md, Invariants). The rule as one pure
 * function: from a LogicVersion, the grant its publisher held, and what each handler profile
 * serves, the list of everything the version would do that its publisher could not do directly.
 * The engine refuses a publish whose list is not empty, and refuses each listed effect again when
 * an instance reaches it (a version recorded before the rule, a profile that stopped serving it).
 */
import { handlerCalls } from './handler-calls.ts';
import type { LogicVersion } from './logic-version.ts';
import { globToRegExp, grants } from './scopes.ts';

/** The grant a version was published under, as recorded with its row. */
export interface PublisherGrant {
  /** The publisher's `sub`; null for the operator's in-process publish. */
  subject: string | null;
  /** The publisher's scopes; null for the operator's in-process publish, which holds every one. */
  scopes: readonly string[] | null;
}

/** The operator's grant: artifacts loaded by `s8flow start`, `dev` and `run`, and in-process publishes. */
export const OPERATOR_GRANT: PublisherGrant = { subject: null, scopes: null };

/**
 * The grant of a version recorded before publishers' grants were: least privilege, as if its
 * publisher could publish and start this one definition and nothing else. Re-publishing the same
 * hash under a grant that covers what it does records that grant instead.
 */
export function legacyGrant(logicId: string): PublisherGrant {
  return { subject: null, scopes: [`flow:publish:${logicId}`, `flow:start:${logicId}`] };
}

/** True when the publisher's `flow:publish` is not narrowed to a glob (the operator's, `flow:admin`'s). */
export function unnarrowed(grant: PublisherGrant): boolean {
  return grant.scopes === null || grants(grant.scopes, 'flow:publish');
}

/** What a handler profile serves: the logicId globs it declared (`FLOW_HANDLER_<NAME>_SERVES`), by its variable. */
export interface HandlerServes {
  /** The variable that declares it, named in refusals so the operator knows what to set. */
  variable: string;
  /** Undefined when the profile declares nothing: it serves only un-narrowed publishers. */
  globs: readonly string[] | undefined;
}

export type GrantCode = 'FLOW_GRANT_HANDLER' | 'FLOW_GRANT_CHILD' | 'FLOW_GRANT_EVENT' | 'FLOW_GRANT_SCHEDULE';

/** One thing a version would do that its publisher's grant does not cover. */
export interface GrantRefusal {
  code: GrantCode;
  /** The step it belongs to; absent for a trigger. */
  step?: string;
  /** Where in the step: its own effect, its compensation, or its module's host function `<import>`. */
  part?: 'step' | 'compensate' | `import:${string}`;
  /** The handler, child logicId or event type it reaches. */
  target: string;
  /** The grant that is missing, as the operator or publisher would write it. */
  missing: string;
  message: string;
}

/** Whether the publisher may have the engine call `handler` on behalf of `logicId`. */
export function servesHandler(grant: PublisherGrant, logicId: string, serves: HandlerServes): boolean {
  return unnarrowed(grant) || (serves.globs ?? []).some((g) => globToRegExp(g).test(logicId));
}

/** Whether the publisher of `parentLogicId` may have the engine start instances of `childLogicId`. */
export function mayStartChild(grant: PublisherGrant, childLogicId: string): boolean {
  return grant.scopes === null || grants(grant.scopes, 'flow:start', childLogicId);
}

/** Whether a version's trigger on `eventType` may turn such events into its input. */
export function mayConsumeEvent(grant: PublisherGrant, eventType: string): boolean {
  return grant.scopes === null || grants(grant.scopes, 'flow:events', eventType);
}

/**
 * Every refusal for `logic` published under `grant`. `servesOf(handler)` says what the named
 * handler profile serves (its name as a step spells it). Pure: no I/O, the same answer at publish
 * and at execution.
 */
export function grantRefusals(logic: LogicVersion, grant: PublisherGrant, servesOf: (handler: string) => HandlerServes): GrantRefusal[] {
  const refusals: GrantRefusal[] = [];
  const handler = (step: string, part: NonNullable<GrantRefusal['part']>, name: string) => {
    const serves = servesOf(name);
    if (servesHandler(grant, logic.logicId, serves)) return;
    const what = part === 'step' ? 'calls' : part === 'compensate' ? 'compensates through' : `imports (${part.slice(7)}) from`;
    refusals.push({
      code: 'FLOW_GRANT_HANDLER',
      step,
      part,
      target: name,
      missing: `${serves.variable} matching ${logic.logicId}`,
      message:
        `step ${step} ${what} handler ${name}, which does not serve ${logic.logicId}: ` +
        `${serves.variable} names no glob matching it and the publisher's flow:publish is narrowed`,
    });
  };
  for (const call of handlerCalls(logic)) handler(call.step, call.part, call.handler);
  for (const [name, step] of Object.entries(logic.steps)) {
    if (step.kind === 'children' && !mayStartChild(grant, step.logicId)) {
      refusals.push({
        code: 'FLOW_GRANT_CHILD',
        step: name,
        part: 'step',
        target: step.logicId,
        missing: `flow:start:${step.logicId}`,
        message: `step ${name} starts ${step.logicId}, but the publisher holds no flow:start for it`,
      });
    }
  }
  for (const t of logic.triggers ?? []) {
    if (mayConsumeEvent(grant, t.event)) continue;
    refusals.push({
      code: 'FLOW_GRANT_EVENT',
      target: t.event,
      missing: `flow:events:${t.event}`,
      message: `a trigger ${'message' in t ? `delivers ${t.event} events to instances of` : 'starts'} ${logic.logicId} on ${t.event} events, but the publisher holds no flow:events for that type`,
    });
  }
  // a declared schedule starts the definition itself, as an API schedule needs flow:start to
  if ((logic.schedules ?? []).length > 0 && !mayStartChild(grant, logic.logicId)) {
    refusals.push({
      code: 'FLOW_GRANT_SCHEDULE',
      target: logic.logicId,
      missing: `flow:start:${logic.logicId}`,
      message: `a schedule starts ${logic.logicId}, but the publisher holds no flow:start for it`,
    });
  }
  return refusals;
}

/** A grant as the version row records it: who vouched, with which scopes, when. */
export interface VouchEntry extends PublisherGrant {
  at: string;
}

/** The grant in force for a version: the last that vouched for it, or least privilege for a row recorded before grants were. */
export function grantInForce(logicId: string, vouched: readonly VouchEntry[]): PublisherGrant {
  const last = vouched.at(-1);
  return last === undefined ? legacyGrant(logicId) : { subject: last.subject, scopes: last.scopes };
}

/** True when two grants say the same (a re-publish under the same grant records nothing new). */
export function sameGrant(a: PublisherGrant, b: PublisherGrant): boolean {
  const key = (g: PublisherGrant) => JSON.stringify([g.subject, g.scopes === null ? null : [...g.scopes].sort()]);
  return key(a) === key(b);
}
