import type { LogicVersion } from '../../contracts/index.ts';
import { apply, type TraceEvent } from '../core/journal.ts';
import type { ChildrenState } from '../core/wake.ts';
import type { Transition } from '../core/transition.ts';
import { childrenResults, childrenSummary } from '../store/children.ts';
import type { Db } from '../store/db.ts';
import type { Stored } from '../store/rows.ts';
import { asScheduler } from '../store/tx.ts';

/**
 * The wake-up transition of a claimed, woken instance: the first of its wakes that still means
 * something (a delay ran out, a deadline passed, its children have all ended). Null when none
 * does — stale timers, children still running — and the instance waits on. The event comes with
 * it, for the journal.
 */
export async function applyWakes(db: Db, logic: LogicVersion, stored: Stored, goOn: boolean): Promise<{ t: Transition; event: TraceEvent } | null> {
  const { instance } = stored;
  for (const wake of stored.wakes) {
    const event: TraceEvent =
      wake.purpose === 'children'
        ? { type: 'children', seq: wake.seq, state: await childrenState(db, instance.id, wake.seq) }
        : { type: 'timer', purpose: wake.purpose, seq: wake.seq };
    const t = await apply(logic, instance, event, goOn);
    if (t !== null) return { t, event };
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
