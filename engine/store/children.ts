import { grantInForce, mayStartChild, type VouchEntry } from '../../contracts/grants.ts';
import { type FlowErrorBody, TERMINAL_STATES } from '../../contracts/index.ts';
import { type ChildStateCounts, childId, countChildren } from '../core/children.ts';
import { initialCtx, type Instance, type JsonValue } from '../core/instance.ts';
import { OUTPUTS_OF_W, type Stored, storedCtx, toStored, type WorkflowRow } from './rows.ts';
import type { Client } from './tx.ts';

const TERMINAL = `(${[...TERMINAL_STATES].map((st) => `'${st}'`).join(', ')})`;

/**
 * Inserts one child per input, all in one statement from a JSON array, pinned to `version` or to
 * the active version of `logicId`. Children start `pending` with no attempt prepared; the worker
 * that claims one runs its first transition. Each child's id is the core's `childId` of its place.
 * Returns how many were spawned.
 *
 * A spawn that may not happen (spawnRefusal) inserts none and wakes the parent at once instead:
 * its fan-in finds no child and fails the step with the refusal (runtime/wakes.ts).
 */
export async function spawnChildren(
  c: Client,
  parent: Instance,
  spawn: { logicId: string; version: number | null; inputs: JsonValue[]; seq: number },
): Promise<number> {
  const refused = await spawnRefusal(c, parent, spawn);
  const res =
    refused !== null
      ? { rowCount: 0 }
      : await c.query(
          `WITH lv AS (
             SELECT logic_id, version, hash, doc FROM logic_versions
             WHERE env_id = $1 AND logic_id = $2 AND ($3::int IS NULL OR version = $3) AND active
             ORDER BY version DESC LIMIT 1
           )
           INSERT INTO workflows (id, env_id, domain, logic_id, version, logic_hash, state, input, current_step, ctx,
                                  correlation_id, parent_id, parent_seq, branch_index, trace_parent)
           SELECT ($9::uuid[])[item.ordinality], $1, lv.doc->>'domain', lv.logic_id, lv.version, lv.hash, 'pending', item.value,
                  lv.doc->>'start', $8::jsonb, $4, $5, $6, item.ordinality - 1,
                  -- a child's spans join its parent's trace (migration 0032)
                  (SELECT p.trace_parent FROM workflows p WHERE p.id = $5)
           FROM lv, jsonb_array_elements($7::jsonb) WITH ORDINALITY AS item`,
          [
            parent.env,
            spawn.logicId,
            spawn.version,
            parent.correlationId,
            parent.id,
            spawn.seq,
            JSON.stringify(spawn.inputs),
            JSON.stringify(storedCtx(initialCtx())),
            spawn.inputs.map((_, index) => childId(parent.id, spawn.seq, index)),
          ],
        );
  if ((res.rowCount ?? 0) === 0) await signalSelf(c, parent, spawn.seq);
  return res.rowCount ?? 0;
}

/**
 * Why a spawn of `logicId` by `parent` may not happen, or null: the parent's publisher holds no
 * `flow:start` for it (FLOW_GRANT_CHILD; contracts/grants.ts, on the grant recorded with the
 * parent's version), or no version of it takes new instances (FLOW_VERSION_RETIRED). Names its
 * env explicitly: the fan-in asks as the scheduler, across envs.
 */
export async function spawnRefusal(
  c: Client,
  parent: Pick<Instance, 'env' | 'logicId' | 'logicHash'>,
  spawn: { logicId: string; version: number | null },
): Promise<FlowErrorBody | null> {
  const res = await c.query<{ grants: VouchEntry[] | null; startable: boolean }>(
    `SELECT (SELECT grants FROM logic_versions WHERE env_id = $1 AND hash = $2 LIMIT 1) AS grants,
            EXISTS (SELECT 1 FROM logic_versions WHERE env_id = $1 AND logic_id = $3 AND ($4::int IS NULL OR version = $4) AND active) AS startable`,
    [parent.env, parent.logicHash, spawn.logicId, spawn.version],
  );
  const row = res.rows[0]!;
  if (!mayStartChild(grantInForce(parent.logicId, row.grants ?? []), spawn.logicId)) {
    return {
      code: 'FLOW_GRANT_CHILD',
      message: `${parent.logicId} may not start ${spawn.logicId}: the grant recorded with its version holds no flow:start:${spawn.logicId}; re-publish it under a grant that does`,
    };
  }
  if (!row.startable) {
    const which = spawn.version === null ? `every version of ${spawn.logicId} is retired` : `${spawn.logicId}@${spawn.version} is retired`;
    return { code: 'FLOW_VERSION_RETIRED', message: `${which}, so no child starts on it; reactivate it or publish a new version` };
  }
  return null;
}

/** A spawn that started nothing wakes its parent now, as the last child's ending would. */
async function signalSelf(c: Client, parent: Instance, seq: number): Promise<void> {
  await c.query(
    `INSERT INTO timers (env_id, id, workflow_id, purpose, fire_at, payload)
     VALUES ($1, gen_random_uuid(), $2, 'children', now(), jsonb_build_object('seq', $3::int))`,
    [parent.env, parent.id, seq],
  );
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

export type ChildrenSummary = ReturnType<typeof countChildren>;

/** The fan-in counts of one spawn: the children's states counted here, judged by the core. */
export async function childrenSummary(c: Client, parentId: string, seq: number): Promise<ChildrenSummary> {
  const res = await c.query<{ state: string; n: number }>(
    'SELECT state, count(*)::int AS n FROM workflows WHERE parent_id = $1 AND parent_seq = $2 GROUP BY state',
    [parentId, seq],
  );
  const counts: ChildStateCounts = {};
  for (const r of res.rows) counts[r.state] = r.n;
  return countChildren(counts);
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
