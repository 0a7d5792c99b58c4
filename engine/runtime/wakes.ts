import type { LogicVersion } from '../../contracts/index.ts';
import { type ChildrenState, onChildren, onTimer } from '../core/wake.ts';
import type { Transition } from '../core/transition.ts';
import { childrenResults, childrenSummary } from '../store/children.ts';
import type { Db } from '../store/db.ts';
import type { Stored } from '../store/rows.ts';
import { asScheduler } from '../store/tx.ts';

/**
 * The wake-up transition of a claimed, woken instance: the first of its wakes that still means
 * something (a delay ran out, a deadline passed, its children have all ended). Null when none
 * does — stale timers, children still running — and the instance waits on.
 */
export async function applyWakes(db: Db, logic: LogicVersion, stored: Stored, goOn: boolean): Promise<Transition | null> {
  const { instance } = stored;
  for (const wake of stored.wakes) {
    const t =
      wake.purpose === 'children'
        ? await onChildren(logic, instance, wake.seq, await childrenState(db, instance.id, wake.seq), goOn)
        : await onTimer(logic, instance, wake, goOn);
    if (t !== null) return t;
  }
  return null;
}

/** Counts in SQL; loads the children's outputs only when the parent can move on. */
function childrenState(db: Db, parentId: string, seq: number): Promise<ChildrenState> {
  return asScheduler(db, async (c) => {
    const summary = await childrenSummary(c, parentId, seq);
    const results = summary.open === 0 ? await childrenResults(c, parentId, seq) : null;
    return { ...summary, results };
  });
}
