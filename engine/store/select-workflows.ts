import type { Client } from './tx.ts';
import { filterClause, type WorkflowFilter } from './workflow-filter.ts';

export interface SelectedWorkflow {
  id: string;
  logicId: string;
  version: number;
  state: string;
  currentStep: string | null;
}

/** The instances a filter covers, oldest first (what a bulk job acts on), and how many in all. */
export async function selectWorkflows(c: Client, f: WorkflowFilter, limit: number): Promise<{ count: number; rows: SelectedWorkflow[] }> {
  const params: unknown[] = [];
  const { where } = filterClause(f, params);
  const count = await c.query<{ n: number }>(`SELECT count(*)::int AS n FROM workflows w WHERE ${where}`, params);
  const rows = await c.query<{ id: string; logic_id: string; version: number; state: string; current_step: string | null }>(
    `SELECT w.id, w.logic_id, w.version, w.state, w.current_step FROM workflows w WHERE ${where} ORDER BY w.created_at, w.id LIMIT ${Number(limit)}`,
    params,
  );
  return {
    count: count.rows[0]!.n,
    rows: rows.rows.map((r) => ({ id: r.id, logicId: r.logic_id, version: r.version, state: r.state, currentStep: r.current_step })),
  };
}
