import type { LogicVersion } from '../../contracts/logic-version.ts';
import type { LiveGroup } from '../core/handler-usage.ts';
import type { Client } from './tx.ts';

export interface VersionWithLive {
  doc: LogicVersion;
  active: boolean;
  /** Instances of the version that have not ended, by state. */
  live: Record<string, number>;
}

/**
 * Every version of the caller's env with its document, and its instances that have not ended by
 * state: one query, the counts read through the partial index of live instances (migration 0004).
 */
export async function versionsWithLive(c: Client): Promise<VersionWithLive[]> {
  const res = await c.query<{ doc: LogicVersion; active: boolean; live: Record<string, number> }>(
    `SELECT lv.doc, lv.active,
            coalesce((SELECT jsonb_object_agg(s.state, s.n) FROM (
                        SELECT w.state, count(*)::int AS n FROM workflows w
                        WHERE w.logic_id = lv.logic_id AND w.version = lv.version
                          AND w.state IN ('pending', 'processing', 'waiting', 'compensating')
                        GROUP BY w.state) s), '{}'::jsonb) AS live
     FROM logic_versions lv ORDER BY lv.logic_id, lv.version`,
  );
  return res.rows;
}

export interface VersionGroup extends LiveGroup {
  logicId: string;
  version: number;
}

interface Row {
  logic_id: string;
  version: number;
  state: LiveGroup['state'];
  current_step: string | null;
  compensations: string[];
  rewind_to: string | null;
  n: number;
}

/**
 * The live instances of the caller's env grouped by where they are: version, state, current step,
 * the set of steps whose compensation is registered and not yet run to success, and the step a
 * repair under way (`ctx.rewinding`) re-runs from once its unwinding is done. Only groups
 * reach Node, the largest first and at most `limit`, so the report's memory does not grow with the
 * instances; a version's instances left out by the limit are its live count less its listed groups.
 * Grouped first by the raw compensation array (cheap per row), then by its sorted set, the way
 * compatibility-groups.ts does and for the same reason.
 */
export async function liveGroups(c: Client, limit: number): Promise<VersionGroup[]> {
  const res = await c.query<Row>(
    `WITH raw AS (
       SELECT w.logic_id, w.version, w.state, w.current_step,
              jsonb_path_query_array(x.ctx->'compensations', '$[*] ? (@.state != "succeeded").step') AS compensations,
              x.ctx->'rewinding'->>'step' AS rewind_to, count(*) AS n
       FROM workflows w CROSS JOIN LATERAL (SELECT w.ctx OFFSET 0) x
       WHERE w.state IN ('pending', 'processing', 'waiting', 'compensating')
       GROUP BY 1, 2, 3, 4, 5, 6
     ), shaped AS (
       SELECT logic_id, version, state, current_step, rewind_to, n,
              coalesce((SELECT array_agg(DISTINCT s ORDER BY s) FROM jsonb_array_elements_text(compensations) s), '{}') AS compensations
       FROM raw
     )
     SELECT logic_id, version, state, current_step, compensations, rewind_to, sum(n)::int AS n
     FROM shaped GROUP BY logic_id, version, state, current_step, compensations, rewind_to
     ORDER BY n DESC, logic_id, version, state, current_step LIMIT $1`,
    [limit],
  );
  return res.rows.map((r) => ({
    logicId: r.logic_id,
    version: r.version,
    state: r.state,
    currentStep: r.current_step,
    compensations: r.compensations,
    rewindTo: r.rewind_to,
    count: r.n,
  }));
}
