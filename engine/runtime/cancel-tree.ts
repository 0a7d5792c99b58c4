import { byCancelOrder, childCancelEvent } from '../core/children.ts';
import { apply } from '../core/journal.ts';
import { openChildren } from '../store/children.ts';
import { type CancelChildren, commitTransition } from '../store/commit-transition.ts';
import type { LogicCache } from './logic-cache.ts';

/**
 * Cancels the whole tree under a parent, in the parent's transaction: each open child (pending,
 * processing, waiting, or compensating) takes the core's own `cancel` decision — its running or
 * parked attempt closed as superseded, and with `compensate` its registered compensations
 * prepared, so it unwinds and then ends `cancelled` — and that child's commit cancels its own
 * children in turn; each child journals the cancel as its own input, so its trace replays to its
 * end. A worker mid-step on a child is fenced out by the row_version bump, and its
 * next heartbeat abandons the call. Children are locked parent first, top down, the order every
 * other writer of a tree takes them in. The event and the order are the core's (core/children.ts),
 * as the in-process runner's are.
 */
export function cancelTree(logics: LogicCache): CancelChildren {
  const cancelChildren: CancelChildren = async (c, parent, compensate) => {
    const open = await openChildren(c, parent.id); // locked in that order too
    for (const child of open.sort((a, b) => byCancelOrder(a.instance, b.instance))) {
      const logic = await logics.get(child.instance.env, child.instance.logicHash, c);
      const event = childCancelEvent(compensate);
      const t = (await apply(logic, child.instance, event))!; // a cancel always decides (or throws)
      // the child is locked: its guard cannot miss
      if (!(await commitTransition(c, child, t, { keepLease: null, cancelChildren, event }))) {
        throw new Error(`workflow ${child.instance.id} moved while locked`);
      }
    }
  };
  return cancelChildren;
}
