import type { LogicVersion } from '../../contracts/index.ts';
import { apply, type TraceEvent } from '../core/journal.ts';
import type { ChildrenState } from '../core/wake.ts';
import type { Transition } from '../core/transition.ts';
import { childrenResults, childrenSummary, spawnRefusal } from '../store/children.ts';
import type { Instance } from '../core/instance.ts';
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
        ? { type: 'children', seq: wake.seq, state: await childrenState(db, logic, instance, wake.seq) }
        : { type: 'timer', purpose: wake.purpose, seq: wake.seq };
    const t = await apply(logic, instance, event, goOn);
    if (t !== null) return { t, event };
  }
  return null;
}

/**
 * Counts in SQL; loads the children's outputs only when the parent can move on. No child at all
 * means the spawn was refused (a children step with no items does not park): the state says why.
 */
function childrenState(db: Db, logic: LogicVersion, parent: Instance, seq: number): Promise<ChildrenState> {
  return asScheduler(db, async (c) => {
    const summary = await childrenSummary(c, parent.id, seq);
    if (summary.total === 0) {
      const step = logic.steps[parent.ctx.running?.step ?? ''];
      const spawn = step?.kind === 'children' ? { logicId: step.logicId, version: step.version ?? null } : null;
      const refused = spawn === null ? null : await spawnRefusal(c, parent, spawn);
      return { ...summary, results: null, refused: refused ?? { code: 'FLOW_VERSION_RETIRED', message: 'no child could be started' } };
    }
    const results = summary.open === 0 ? await childrenResults(c, parent.id, seq) : null;
    return { ...summary, results };
  });
}
