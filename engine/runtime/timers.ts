import { onTimer } from '../core/wake.ts';
import { commitTransition } from '../store/commit-transition.ts';
import type { Db } from '../store/db.ts';
import { loadWorkflow } from '../store/load-workflow.ts';
import { takeDueTimers } from '../store/timers.ts';
import { asScheduler } from '../store/tx.ts';
import type { LogicCache } from './logic-cache.ts';

/**
 * Fires up to `limit` due timers, each with its transition, in one transaction. A stale timer
 * (its attempt already over) is marked fired and changes nothing. Returns how many fired.
 */
export async function fireDueTimers(db: Db, logics: LogicCache, limit = 200): Promise<number> {
  return asScheduler(db, async (c) => {
    const due = await takeDueTimers(c, limit);
    for (const timer of due) {
      const stored = await loadWorkflow(c, timer.workflow_id, { forUpdate: true });
      if (stored === null) continue;
      const logic = await logics.get(timer.env_id, stored.instance.logicHash, c);
      const t = await onTimer(logic, stored.instance, { purpose: timer.purpose, seq: timer.payload.seq });
      if (t !== null) await commitTransition(c, stored, t, { keepLease: null });
    }
    return due.length;
  });
}
