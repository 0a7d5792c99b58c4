import type { Instance } from '../core/instance.ts';
import { decisionOf, type TraceEntry, type TraceEvent } from '../core/journal.ts';
import type { Transition } from '../core/transition.ts';
import type { WorkflowState } from '../../contracts/index.ts';
import type { Client } from './tx.ts';

/** The journal row a transition writes (migration 0008), as commit_journaled() reads it from `p->'journal'`. */
export interface JournalParam {
  /** The row_version the transition writes. */
  n: number;
  fromState: WorkflowState;
  event: TraceEvent;
  decision: ReturnType<typeof decisionOf>;
  /** The instance before the event, on the row where it began: what a replay starts from. */
  initial?: Instance;
}

/** `before`: the instance the event was applied to; kept when the event began it. */
export function journalParam(n: number, before: Instance, event: TraceEvent, t: Transition): JournalParam {
  return { n, fromState: before.state, event, decision: decisionOf(t), ...(event.type === 'begin' ? { initial: before } : {}) };
}

/** A journal row written in a transaction of its own making (a migration moving an instance); a commit writes its own through commit_journaled(), a start through insert_started(). */
export async function insertJournal(c: Client, env: string, id: string, j: JournalParam): Promise<void> {
  await c.query(
    `INSERT INTO journal (env_id, workflow_id, n, from_state, event, decision, initial, born)
     VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7::jsonb, (SELECT created_at FROM workflows WHERE id = $2))`,
    [env, id, j.n, j.fromState, JSON.stringify(j.event), JSON.stringify(j.decision), JSON.stringify(j.initial ?? null)],
  );
}

/** Every journalled input of one instance, in commit order, as trace entries, and the instance it began as. */
export async function loadJournal(c: Client, id: string): Promise<{ initial: Instance | null; entries: TraceEntry[] }> {
  const res = await c.query<{ from_state: WorkflowState; event: TraceEvent; decision: TraceEntry['decision']; at: Date; initial: Instance | null }>(
    'SELECT from_state, event, decision, at, initial FROM journal WHERE workflow_id = $1 ORDER BY n',
    [id],
  );
  const entries = res.rows.map((r) => ({ event: r.event, decision: r.decision, atMs: r.at.getTime(), from: r.from_state }));
  return { initial: res.rows.find((r) => r.initial !== null)?.initial ?? null, entries };
}
