import { initialCtx, type Instance, type JsonValue } from '../core/instance.ts';
import { OUTPUTS_OF_W, type Stored, storedCtx, toStored, type WorkflowRow } from './rows.ts';
import type { Client } from './tx.ts';

const TERMINAL = `('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered')`;

/**
 * Inserts one child per input, all in one statement from a JSON array, pinned to `version` or to
 * the active version of `logicId`. Children start `pending` with no attempt prepared; the worker
 * that claims one runs its first transition. Returns how many were spawned.
 */
export async function spawnChildren(
  c: Client,
  parent: Instance,
  spawn: { logicId: string; version: number | null; inputs: JsonValue[]; seq: number },
): Promise<number> {
  const res = await c.query(
    `WITH lv AS (
       SELECT logic_id, version, hash, doc FROM logic_versions
       WHERE logic_id = $2 AND ($3::int IS NULL OR version = $3)
       ORDER BY active DESC, version DESC LIMIT 1
     )
     INSERT INTO workflows (id, env_id, domain, logic_id, version, logic_hash, state, input, current_step, ctx,
                            correlation_id, parent_id, parent_seq, branch_index)
     SELECT gen_random_uuid(), $1, lv.doc->>'domain', lv.logic_id, lv.version, lv.hash, 'pending', item.value,
            lv.doc->>'start', $8::jsonb, $4, $5, $6, item.ordinality - 1
     FROM lv, jsonb_array_elements($7::jsonb) WITH ORDINALITY AS item`,
    [parent.env, spawn.logicId, spawn.version, parent.correlationId, parent.id, spawn.seq, JSON.stringify(spawn.inputs), JSON.stringify(storedCtx(initialCtx()))],
  );
  return res.rowCount ?? 0;
}

/**
 * A child has ended: wake its parent. Written with the ending, so both become visible together.
 * Every ending writes its own signal: coalescing them (one pending signal per parent) lost
 * endings, because a child could skip its signal in favour of one that a poller fired before the
 * child committed; the timer poller handles a burst for one parent once instead (`fire_due_timers()`, engine/store/timers.ts).
 */
export async function signalParent(c: Client, child: Instance, parentSeq: number): Promise<void> {
  await c.query(
    `INSERT INTO timers (env_id, id, workflow_id, purpose, fire_at, payload)
     VALUES ($1, gen_random_uuid(), $2, 'children', now(), jsonb_build_object('seq', $3::int))`,
    [child.env, child.parentId, parentSeq],
  );
}

export interface ChildrenSummary {
  total: number;
  open: number;
  failed: number;
}

export async function childrenSummary(c: Client, parentId: string, seq: number): Promise<ChildrenSummary> {
  const res = await c.query<ChildrenSummary>(
    `SELECT count(*)::int AS total,
            count(*) FILTER (WHERE state NOT IN ${TERMINAL})::int AS open,
            count(*) FILTER (WHERE state IN ${TERMINAL} AND state <> 'completed')::int AS failed
     FROM workflows WHERE parent_id = $1 AND parent_seq = $2`,
    [parentId, seq],
  );
  return res.rows[0]!;
}

export interface ChildResult {
  state: string;
  output: JsonValue;
  error: JsonValue;
}

/** Every child's ending, in item order. */
export async function childrenResults(c: Client, parentId: string, seq: number): Promise<ChildResult[]> {
  const res = await c.query<ChildResult>(
    'SELECT state, output, error FROM workflows WHERE parent_id = $1 AND parent_seq = $2 ORDER BY branch_index',
    [parentId, seq],
  );
  return res.rows;
}

/**
 * The children of `parentId` that have not ended, locked (NO KEY UPDATE, as loadWorkflow) until
 * the transaction ends. A child committing meanwhile is waited for, then seen as it now is.
 */
export async function openChildren(c: Client, parentId: string): Promise<Stored[]> {
  const res = await c.query<WorkflowRow>(
    `SELECT w.*, ${OUTPUTS_OF_W} FROM workflows w
     WHERE w.parent_id = $1 AND w.state NOT IN ${TERMINAL} ORDER BY w.parent_seq, w.branch_index FOR NO KEY UPDATE OF w`,
    [parentId],
  );
  return res.rows.map(toStored);
}
