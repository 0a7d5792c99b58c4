import type { Client } from './tx.ts';

export interface GaugeRow {
  metric: 'instances' | 'runnable' | 'oldest_runnable_age' | 'parked';
  env_id: string | null;
  logic_id: string | null;
  /** The state (instances) or the reason (parked). */
  label: string | null;
  value: number;
}

/**
 * Everything the database-wide gauges report, in one statement (run as the scheduler: all envs),
 * so every engine node scraped reports the same truth at the cost of one query. It reads only
 * instances that have not ended, through the partial index `workflows_live` (migration 0004), so
 * its cost follows the live work, not the history. "Runnable" is exactly what claim_workflows()
 * would take now: due pending/compensating instances, woken waiting ones, expired leases. A
 * parked instance's reason is the kind of step it waits on (`message` for a waitFor step); a
 * waiting proxy/http/func step is waiting for its 202 callback.
 */
export async function readGauges(c: Client): Promise<GaugeRow[]> {
  const res = await c.query<GaugeRow>(
    `WITH live AS (
       SELECT env_id, logic_id, version, state, current_step, run_at,
              (state IN ('pending', 'compensating') OR (state = 'waiting' AND wakes IS NOT NULL))
                AND run_at <= now() AND (lease_expires_at IS NULL OR lease_expires_at < now())
              OR (state = 'processing' AND lease_expires_at < now()) AS runnable
       FROM workflows WHERE state IN ('pending', 'processing', 'waiting', 'compensating')
     ), parked AS (
       SELECT env_id, logic_id, version, current_step, count(*) AS n FROM live WHERE state = 'waiting'
       GROUP BY env_id, logic_id, version, current_step
     )
     SELECT 'instances' AS metric, env_id, logic_id, state AS label, count(*)::float8 AS value FROM live GROUP BY env_id, logic_id, state
     UNION ALL
     SELECT 'runnable', NULL, NULL, NULL, count(*)::float8 FROM live WHERE runnable
     UNION ALL
     SELECT 'oldest_runnable_age', NULL, NULL, NULL, coalesce(extract(epoch FROM now() - min(run_at)), 0)::float8 FROM live WHERE runnable
     UNION ALL
     SELECT 'parked', p.env_id, NULL,
            CASE lv.doc #>> ARRAY['steps', p.current_step, 'kind'] WHEN 'decision' THEN 'decision' WHEN 'delay' THEN 'delay'
                 WHEN 'children' THEN 'children' WHEN 'waitFor' THEN 'message' ELSE 'callback' END AS label,
            sum(p.n)::float8
     FROM parked p JOIN logic_versions lv ON lv.env_id = p.env_id AND lv.logic_id = p.logic_id AND lv.version = p.version
     GROUP BY p.env_id, 4`,
  );
  return res.rows;
}
