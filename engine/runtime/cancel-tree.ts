import { apply, type TraceEvent } from '../core/journal.ts';
import { openChildren } from '../store/children.ts';
import { type CancelChildren, commitTransition } from '../store/commit-transition.ts';
import type { LogicCache } from './logic-cache.ts';

/** What a descendant's `error` says when it ends because its parent stopped waiting for it. */
export const CHILD_CANCEL_REASON = 'the parent workflow stopped waiting for it';

/**
 * Cancels the whole tree under a parent, in the parent's transaction: each open child (pending,
 * processing, waiting, or compensating) takes the core's own `cancel` decision — its running or
 * parked attempt closed as superseded, and with `compensate` its registered compensations
 * prepared, so it unwinds and then ends `cancelled` — and that child's commit cancels its own
 * children in turn; each child journals the cancel as its own input, so its trace replays to its
 * end. A worker mid-step on a child is fenced out by the row_version bump, and its
 * next heartbeat abandons the call. Children are locked parent first, top down, the order every
 * other writer of a tree takes them in.
 */
export function cancelTree(logics: LogicCache): CancelChildren {
  const cancelChildren: CancelChildren = async (c, parent, compensate) => {
    for (const child of await openChildren(c, parent.id)) {
      const logic = await logics.get(child.instance.env, child.instance.logicHash, c);
      const event: TraceEvent = { type: 'verb', verb: 'cancel', args: { reason: CHILD_CANCEL_REASON, compensate } };
      const t = (await apply(logic, child.instance, event))!; // a cancel always decides (or throws)
      // the child is locked: its guard cannot miss
      if (!(await commitTransition(c, child, t, { keepLease: null, cancelChildren, event }))) {
        throw new Error(`workflow ${child.instance.id} moved while locked`);
      }
    }
  };
  return cancelChildren;
}
