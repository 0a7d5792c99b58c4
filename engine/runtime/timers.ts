import { type ChildrenState, onChildren, onTimer } from '../core/wake.ts';
import { childrenResults, childrenSummary } from '../store/children.ts';
import type { Client } from '../store/tx.ts';
import { commitTransition } from '../store/commit-transition.ts';
import type { Db } from '../store/db.ts';
import { loadWorkflow, loadWorkflowsForUpdate } from '../store/load-workflow.ts';
import { takeDueTimers } from '../store/timers.ts';
import { asScheduler } from '../store/tx.ts';
import type { LogicCache } from './logic-cache.ts';

/**
 * Fires up to `limit` due timers, each with its transition, in one transaction. A stale timer
 * (its attempt already over) is marked fired and changes nothing. Returns how many fired.
 * Their instances are read and locked in one round trip up front, not one by one.
 */
export async function fireDueTimers(db: Db, logics: LogicCache, limit = 200): Promise<number> {
  return asScheduler(db, async (c) => {
    const due = await takeDueTimers(c, limit);
    if (due.length === 0) return 0;
    const loaded = await loadWorkflowsForUpdate(c, [...new Set(due.map((timer) => timer.workflow_id))]);
    const counted = new Set<string>();
    for (const timer of due) {
      // every ending in this batch is already visible: one count per parent is enough
      if (timer.purpose === 'children') {
        if (counted.has(timer.workflow_id)) continue;
        counted.add(timer.workflow_id);
      }
      // an instance with a second timer in this batch is read again after its first transition
      const stored = loaded.get(timer.workflow_id) ?? (await loadWorkflow(c, timer.workflow_id, { forUpdate: true }));
      loaded.delete(timer.workflow_id);
      if (stored === null) continue;
      const logic = await logics.get(timer.env_id, stored.instance.logicHash, c);
      const seq = timer.payload.seq;
      const t =
        timer.purpose === 'children'
          ? await onChildren(logic, stored.instance, seq, await childrenState(c, timer.workflow_id, seq))
          : await onTimer(logic, stored.instance, { purpose: timer.purpose, seq });
      if (t !== null) await commitTransition(c, stored, t, { keepLease: null });
    }
    return due.length;
  });
}

/** Counts in SQL; loads the children's outputs only when the parent can move on. */
async function childrenState(c: Client, parentId: string, seq: number): Promise<ChildrenState> {
  const summary = await childrenSummary(c, parentId, seq);
  const results = summary.open === 0 ? await childrenResults(c, parentId, seq) : null;
  return { ...summary, results };
}
