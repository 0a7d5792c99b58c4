import type { Client } from './tx.ts';

export interface StateCount {
  logicId: string;
  version: number;
  state: string;
  count: number;
}

export interface WaitingDecision {
  id: string;
  logicId: string;
  version: number;
  step: string;
  correlationId: string | null;
  since: string;
}

export interface Overview {
  counts: StateCount[];
  decisions: WaitingDecision[];
  /** Instances a worker could claim now. */
  queueDepth: number;
  /** Age of the oldest of them, in ms (0 when none): what to autoscale on. */
  oldestRunnableMs: number;
}

/** What an operator looks at first, in three cheap statements (counts are grouped, lists capped). */
export async function readOverview(c: Client, limit = 50): Promise<Overview> {
  const counts = await c.query<{ logic_id: string; version: number; state: string; n: number }>(
    'SELECT logic_id, version, state, count(*)::int AS n FROM workflows GROUP BY 1, 2, 3 ORDER BY 1, 2, 3',
  );
  // parked on a decision: the current step of the pinned version is a decision step
  const decisions = await c.query<{ id: string; logic_id: string; version: number; current_step: string; correlation_id: string | null; updated_at: Date }>(
    `SELECT w.id, w.logic_id, w.version, w.current_step, w.correlation_id, w.updated_at
       FROM workflows w JOIN logic_versions v ON v.env_id = w.env_id AND v.logic_id = w.logic_id AND v.version = w.version
      WHERE w.state = 'waiting' AND v.doc->'steps'->w.current_step->>'kind' = 'decision'
      ORDER BY w.updated_at LIMIT $1`,
    [limit],
  );
  const queue = await c.query<{ n: number; oldest_ms: number | null }>(
    `SELECT count(*)::int AS n, (extract(epoch FROM now() - min(run_at)) * 1000)::float8 AS oldest_ms FROM workflows
      WHERE (state = 'pending' OR (state = 'waiting' AND wakes IS NOT NULL)) AND run_at <= now()`,
  );
  return {
    counts: counts.rows.map((r) => ({ logicId: r.logic_id, version: r.version, state: r.state, count: r.n })),
    decisions: decisions.rows.map((r) => ({
      id: r.id,
      logicId: r.logic_id,
      version: r.version,
      step: r.current_step,
      correlationId: r.correlation_id,
      since: r.updated_at.toISOString(),
    })),
    queueDepth: queue.rows[0]?.n ?? 0,
    oldestRunnableMs: Math.max(0, Math.round(queue.rows[0]?.oldest_ms ?? 0)),
  };
}
