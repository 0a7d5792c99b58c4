import { TRACE_FORMAT } from '../../contracts/api/workflows.ts';
import { initialCtx, type Instance } from '../core/instance.ts';
import type { Trace } from '../core/journal.ts';
import type { Db } from '../store/db.ts';
import { NotFound } from '../store/errors.ts';
import { loadJournal } from '../store/journal.ts';
import { loadWorkflow } from '../store/load-workflow.ts';
import { findLogicVersionByHash } from '../store/logic-versions.ts';
import { type Client, inEnv } from '../store/tx.ts';

export { TRACE_FORMAT };

/**
 * Exports one instance of `env` as a trace (`s8flow trace`, `GET …/history?format=trace`): its
 * pinned LogicVersion hash, the instance as it was created, every journalled input — each
 * attempt's outcome, func steps' host-call records, decisions, timer firings, children fan-ins,
 * callbacks, verbs — with the decision the engine committed for it, and the record it has now.
 * `replay(logic, trace)` (sentin8-flow/testing) reproduces it without calling anything.
 *
 * One read-only transaction, so the journal and the record are from the same moment.
 */
export async function exportTrace(from: Db | { db: Db }, env: string, id: string): Promise<Trace & { format: typeof TRACE_FORMAT }> {
  const db = 'pool' in from ? from : from.db;
  return inEnv(db, env, (c) => readTrace(c, id));
}

/** `exportTrace` in a transaction the caller holds, scoped to the instance's env. */
export async function readTrace(c: Client, id: string): Promise<Trace & { format: typeof TRACE_FORMAT }> {
  const stored = await loadWorkflow(c, id);
  if (stored === null) throw new NotFound(`workflow ${id}`);
  const now = stored.instance;
  const logic = await findLogicVersionByHash(c, now.logicHash);
  if (logic === null) throw new NotFound(`LogicVersion ${now.logicHash} of workflow ${id}`);
  const journal = await loadJournal(c, id);
  // journalled when it began; else (it has not begun) as start-instance.ts and children.ts create it
  const initial: Instance = journal.initial ?? {
    ...now,
    state: 'pending',
    output: null,
    currentStep: logic.start,
    error: null,
    generation: 0,
    ctx: initialCtx(),
  };
  return {
    format: TRACE_FORMAT,
    logicHash: now.logicHash,
    initial,
    entries: journal.entries,
    final: { state: now.state, currentStep: now.currentStep, generation: now.generation, output: now.output, error: now.error },
  };
}
