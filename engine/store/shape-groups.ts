import type { Client } from './tx.ts';
import { filterClause, type WorkflowFilter } from './workflow-filter.ts';

/**
 * The instances a migration selects (runtime/migrations.ts): these ids, in their order, or the
 * first `limit` a filter covers, oldest first — the order its job takes them in.
 */
export type Selection = { ids: readonly string[] } | { filter: WorkflowFilter; limit: number };

/**
 * What a migration's verdict on an instance depends on, but for its id: its version and state,
 * where it is and what is running, its generation, the sets of steps it holds an output of and a
 * compensation still to run of, the steps it entered more than once (`visits`, part of their
 * keys), whether a worker holds it now, and the names of the messages buffered for it. Two instances of one shape get the same refusal, landing and next steps, each under its
 * own id (core/migrate.ts, `memberPlan`).
 */
export interface SelectedShape {
  logicHash: string;
  version: number;
  state: string;
  currentStep: string | null;
  running: 'step' | 'compensation' | null;
  generation: number;
  outputs: string[];
  compensations: string[];
  visits: Record<string, number>;
  /** A worker holds its lease now (core/migrate.ts, RowFacts). */
  held: boolean;
  /** Names of the messages buffered for it, sorted. */
  messages: string[];
}

/** A group of the selection: its shape, how many, and one of them (the least id) to plan. */
export interface SelectedGroup extends SelectedShape {
  count: number;
  representative: string;
}

/** One selected instance, as a page of the dry run lists it: its shape, and the attempt under way whose key it keeps. */
export interface SelectedMember extends SelectedShape {
  id: string;
  runningAttempt: { step: string; attempt: number; idempotencyKey: string } | null;
}

interface ShapeRow {
  logic_hash: string;
  version: number;
  state: string;
  current_step: string | null;
  running: 'step' | 'compensation' | null;
  generation: number;
  outputs: string[];
  compensations: string[];
  visits: Record<string, number>;
  held: boolean;
  messages: string[];
}

/**
 * The selection as a CTE `sel (id, pos)`, `pos` its order. An id not visible in the caller's env
 * (missing, or another env's: row-level security) is not in it.
 */
function selectionCte(s: Selection, params: unknown[]): string {
  if ('ids' in s) {
    params.push([...s.ids]);
    return `sel AS (SELECT u.id, u.pos FROM unnest($${params.length}::uuid[]) WITH ORDINALITY u(id, pos) JOIN workflows w ON w.id = u.id)`;
  }
  const { where } = filterClause(s.filter, params);
  params.push(s.limit);
  return `sel AS (SELECT w.id, row_number() OVER (ORDER BY w.created_at, w.id) AS pos FROM workflows w WHERE ${where}
                  ORDER BY w.created_at, w.id LIMIT $${params.length}::int)`;
}

const SHAPE_COLUMNS = 'logic_hash, version, state, current_step, running, generation, outputs, compensations, visits, held, messages';
/** Held by a worker now, on the database clock (core/migrate.ts, RowFacts). */
const HELD = 'coalesce(w.lease_expires_at > now(), false) AS held';
/**
 * The selection's buffered message names per instance, sorted: one pass over the few buffered
 * rows (workflow_messages_buffered), hash-joined, rather than a lookup per instance.
 */
const BUFFERED = `LEFT JOIN (SELECT m.workflow_id, array_agg(DISTINCT m.name ORDER BY m.name) AS names
                               FROM workflow_messages m WHERE m.state = 'buffered' GROUP BY m.workflow_id) b ON b.workflow_id = w.id`;

/**
 * The selection grouped by shape, in one statement: only groups reach Node, the largest first.
 * As in compatibility-groups.ts, each row does only cheap jsonb extraction and is grouped by its
 * raw arrays; the arrays are sorted and deduplicated per raw group, and the raw groups with the
 * same sets merged, afterwards.
 */
export async function shapeGroups(c: Client, s: Selection): Promise<SelectedGroup[]> {
  const params: unknown[] = [];
  const res = await c.query<ShapeRow & { n: number; representative: string }>(
    `WITH ${selectionCte(s, params)}, raw AS (
       SELECT w.logic_hash, w.version, w.state, w.current_step, x.ctx->'running'->>'kind' AS running, w.generation,
              x.ctx->'order' AS outputs,
              jsonb_path_query_array(x.ctx->'compensations', '$[*] ? (@.state != "succeeded").step') AS compensations,
              coalesce(x.ctx->'visits', '{}') AS visits, ${HELD}, coalesce(b.names, '{}') AS messages,
              count(*) AS n, min(w.id::text) AS representative
       FROM sel JOIN workflows w ON w.id = sel.id CROSS JOIN LATERAL (SELECT w.ctx OFFSET 0) x ${BUFFERED}
       GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11
     ), shaped AS (
       SELECT logic_hash, version, state, current_step, running, generation, visits, held, messages, n, representative,
              coalesce((SELECT array_agg(DISTINCT o ORDER BY o) FROM jsonb_array_elements_text(outputs) o), '{}') AS outputs,
              coalesce((SELECT array_agg(DISTINCT s ORDER BY s) FROM jsonb_array_elements_text(compensations) s), '{}') AS compensations
       FROM raw
     )
     SELECT ${SHAPE_COLUMNS}, sum(n)::int AS n, min(representative) AS representative
     FROM shaped GROUP BY ${SHAPE_COLUMNS}
     ORDER BY n DESC, state, current_step, generation, representative`,
    params,
  );
  return res.rows.map((r) => ({ ...shapeOf(r), count: r.n, representative: r.representative }));
}

/**
 * One page of the selection, in its order: up to `size` instances after `after` (from its start
 * when null), each with its shape, and the cursor of the next page (null: this is the last).
 * Null when `after` is not in the selection.
 */
export async function shapePage(c: Client, s: Selection, after: string | null, size: number): Promise<{ members: SelectedMember[]; nextAfter: string | null } | null> {
  const params: unknown[] = [];
  const cte = selectionCte(s, params);
  params.push(after, size + 1);
  const [a, n] = [`$${params.length - 1}::uuid`, `$${params.length}::int`];
  const res = await c.query<ShapeRow & { id: string; running_attempt: SelectedMember['runningAttempt'] | null; found: boolean }>(
    `WITH ${cte}, start AS (SELECT coalesce((SELECT pos FROM sel WHERE id = ${a}), 0) AS pos, ${a} IS NULL OR EXISTS (SELECT 1 FROM sel WHERE id = ${a}) AS found)
     SELECT w.id, w.logic_hash, w.version, w.state, w.current_step, w.ctx->'running'->>'kind' AS running, w.generation,
            coalesce((SELECT array_agg(DISTINCT o ORDER BY o) FROM jsonb_array_elements_text(w.ctx->'order') o), '{}') AS outputs,
            coalesce((SELECT array_agg(DISTINCT s ORDER BY s)
                        FROM jsonb_array_elements_text(jsonb_path_query_array(w.ctx->'compensations', '$[*] ? (@.state != "succeeded").step')) s), '{}') AS compensations,
            coalesce(w.ctx->'visits', '{}') AS visits, ${HELD}, coalesce(b.names, '{}') AS messages,
            CASE WHEN w.ctx->'running' IS NOT NULL AND jsonb_typeof(w.ctx->'running') = 'object'
                 THEN jsonb_build_object('step', w.ctx->'running'->'step', 'attempt', w.ctx->'running'->'attempt', 'idempotencyKey', w.ctx->'running'->'idempotencyKey') END AS running_attempt,
            start.found
       FROM start LEFT JOIN sel ON sel.pos > start.pos LEFT JOIN workflows w ON w.id = sel.id ${BUFFERED}
      ORDER BY sel.pos LIMIT ${n}`,
    params,
  );
  if (res.rows[0]?.found === false) return null;
  const rows = res.rows.filter((r) => r.id !== null);
  const members = rows.slice(0, size).map((r) => ({ ...shapeOf(r), id: r.id, runningAttempt: r.running_attempt }));
  return { members, nextAfter: rows.length > size ? members.at(-1)!.id : null };
}

/** The group a shape belongs to: equal shapes, equal keys (the arrays sorted, `visits` as jsonb prints it). */
export function shapeKey(s: SelectedShape): string {
  return JSON.stringify([s.logicHash, s.state, s.currentStep, s.running, s.generation, s.outputs, s.compensations, s.visits, s.held, s.messages]);
}

function shapeOf(r: ShapeRow): SelectedShape {
  return {
    logicHash: r.logic_hash,
    version: r.version,
    state: r.state,
    currentStep: r.current_step,
    running: r.running,
    generation: r.generation,
    outputs: r.outputs,
    compensations: r.compensations,
    visits: r.visits,
    held: r.held,
    messages: r.messages,
  };
}
