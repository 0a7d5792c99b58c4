import type { Context } from '@opentelemetry/api';
import type { LogicVersion } from '../../contracts/index.ts';
import type { Instance } from '../core/instance.ts';
import { apply, type TraceEvent } from '../core/journal.ts';
import type { Transition } from '../core/transition.ts';
import { insertAudit } from '../store/audit.ts';
import { commitTransition } from '../store/commit-transition.ts';
import type { Db } from '../store/db.ts';
import { ConcurrentUpdate, NotFound, refusedForData } from '../store/errors.ts';
import { loadWorkflow } from '../store/load-workflow.ts';
import type { Stored } from '../store/rows.ts';
import { replaceInput } from '../store/replace-input.ts';
import { inEnv } from '../store/tx.ts';
import { cancelTree } from './cancel-tree.ts';
import type { LogicCache } from './logic-cache.ts';
import { ChangeUnstorable } from './storable.ts';
import type { TransitionObserver } from './observer.ts';
import { traceResume } from './trace-spans.ts';

export interface AuditOf {
  verb: string;
  actor: string;
  reason: string | null;
  args: unknown;
}

export interface MutateOptions {
  /** The audit row written with the change (a verb, a resume). */
  audit?: AuditOf;
  /** Refuses (throws) when the caller may not act on this instance; read first, so a wrong env is a 404. */
  allow?: (inst: Instance, logic: LogicVersion) => void;
  /** Told of the transition once committed, as the worker loop tells it (metrics, log lines). */
  observer?: TransitionObserver;
  /** The trace context of the request that brought the event (a decision, a completion): its spans link to it. */
  caller?: Context;
}

/**
 * Applies one event to an instance outside the worker loop (a verb, a resume, a completion)
 * through the core: read under a row lock, check the caller, decide, commit guarded by
 * row_version with its journal row, audit — in one transaction. A worker that is mid-step on the
 * same instance is fenced out by the row_version bump; a refusal or a decision that throws leaves
 * everything as it was. A change Postgres refuses for its data is the caller's 422, not a 500.
 */
export async function mutateWorkflow(
  db: Db,
  logics: LogicCache,
  env: string,
  id: string,
  event: TraceEvent,
  { audit, allow, observer, caller }: MutateOptions = {},
): Promise<Transition> {
  const { t, from } = await decide(db, logics, env, id, event, { audit, allow }).catch((err: unknown) => {
    throw refusedForData(err) ? new ChangeUnstorable(err) : err;
  });
  traceResume(from, event, caller);
  observer?.onTransition?.(from.instance, t, true);
  return t;
}

function decide(db: Db, logics: LogicCache, env: string, id: string, event: TraceEvent, { audit, allow }: MutateOptions): Promise<{ t: Transition; from: Stored }> {
  return inEnv(db, env, async (c) => {
    const stored = await loadWorkflow(c, id, { forUpdate: true });
    if (stored === null) throw new NotFound(`workflow ${id}`);
    const logic = await logics.get(env, stored.instance.logicHash, c);
    allow?.(stored.instance, logic);
    const t = await apply(logic, stored.instance, event);
    // every event from outside the worker loop decides something or is refused (it throws)
    if (t === null) throw new Error(`workflow ${id}: ${event.type} decided nothing`);
    if (!(await commitTransition(c, stored, t, { keepLease: null, cancelChildren: cancelTree(logics), event }))) throw new ConcurrentUpdate(id);
    // only a repair at the start step changes the input (the draft is a clone: compare by value)
    if (JSON.stringify(t.instance.input) !== JSON.stringify(stored.instance.input)) await replaceInput(c, id, t.instance.input);
    if (audit !== undefined) {
      await insertAudit(c, { workflowId: id, env, ...audit, before: summary(stored.instance), after: summary(t.instance) });
    }
    return { t, from: stored };
  });
}

/** What an audit row keeps of each side: enough to see what the verb changed. */
export function summary(i: Instance) {
  return { state: i.state, currentStep: i.currentStep, generation: i.generation, error: i.error, output: i.output };
}
