import type { InstanceShape } from '../core/compatibility.ts';
import type { Client } from './tx.ts';

/** Live instances of one version that share a shape, counted, with one of them to stand for all. */
export interface ShapeGroup extends InstanceShape {
  count: number;
  /** One instance of the group (the least id): the one whose next steps the report simulates. */
  representative: string;
}

export interface ShapeGroups {
  groups: ShapeGroup[];
  /** Live instances of the version in all, across every group (listed or not). */
  live: number;
  /** Groups in all; more than `groups.length` when the listing was cut at its limit. */
  groupCount: number;
}

interface Row {
  state: InstanceShape['state'];
  current_step: string | null;
  running: 'step' | 'compensation' | null;
  generation: number;
  outputs: string[];
  compensations: string[];
  n: number;
  representative: string;
  groups: number;
  live: number;
}

/**
 * The live (not ended) instances of `logicId@version` in the caller's env, grouped by shape in one
 * statement: state, current step, what is running, generation, the sorted set of steps with an
 * output, and the sorted set of steps with a compensation still to run. Only groups reach Node,
 * the largest first and at most `limit` of them, so the answer's size does not grow with the
 * instances. The instances are found through the partial index of live instances (migration
 * 0004); their output keys through `workflow_outputs`' primary key, and their compensations
 * from `ctx`, each per instance inside the aggregate.
 */
export async function compatibilityGroups(c: Client, logicId: string, version: number, limit: number): Promise<ShapeGroups> {
  const res = await c.query<Row>(
    `WITH shapes AS (
       SELECT w.id, w.state, w.current_step, w.ctx->'running'->>'kind' AS running, w.generation,
              coalesce((SELECT array_agg(o.step ORDER BY o.step) FROM workflow_outputs o WHERE o.workflow_id = w.id), '{}') AS outputs,
              coalesce((SELECT array_agg(DISTINCT r->>'step' ORDER BY r->>'step')
                          FROM jsonb_array_elements(w.ctx->'compensations') r WHERE r->>'state' <> 'succeeded'), '{}') AS compensations
       FROM workflows w
       WHERE w.logic_id = $1 AND w.version = $2 AND w.state IN ('pending', 'processing', 'waiting', 'compensating')
     ), grouped AS (
       SELECT state, current_step, running, generation, outputs, compensations, count(*)::int AS n, min(id::text) AS representative
       FROM shapes GROUP BY state, current_step, running, generation, outputs, compensations
     )
     SELECT g.*, count(*) OVER ()::int AS groups, (sum(g.n) OVER ())::int AS live
     FROM grouped g ORDER BY g.n DESC, g.state, g.current_step, g.generation, g.representative LIMIT $3`,
    [logicId, version, limit],
  );
  const first = res.rows[0];
  return {
    groups: res.rows.map((r) => ({
      state: r.state,
      currentStep: r.current_step,
      running: r.running,
      generation: r.generation,
      outputs: r.outputs,
      compensations: r.compensations,
      count: r.n,
      representative: r.representative,
    })),
    live: first?.live ?? 0,
    groupCount: first?.groups ?? 0,
  };
}
