import type { InstanceFilter } from '../../contracts/api/bulk.ts';
import type { Client } from './tx.ts';

export interface SelectedWorkflow {
  id: string;
  logicId: string;
  version: number;
  state: string;
  currentStep: string | null;
}

/** The WHERE clause of a filter, every value a parameter. */
export function filterClause(f: InstanceFilter, params: unknown[]): string {
  const where: string[] = [];
  const add = (sql: string, v: unknown) => {
    params.push(v);
    where.push(sql.replace('?', `$${params.length}`));
  };
  if (f.state !== undefined) add('state = ?', f.state);
  if (f.logicId !== undefined) add('logic_id = ?', f.logicId);
  if (f.version !== undefined) add('version = ?', f.version);
  if (f.correlationId !== undefined) add('correlation_id = ?', f.correlationId);
  if (f.from !== undefined) add('created_at >= ?::timestamptz', f.from);
  if (f.to !== undefined) add('created_at < ?::timestamptz', f.to);
  return where.length === 0 ? 'true' : where.join(' AND ');
}

/** The instances a filter covers, oldest first (what a bulk job acts on), and how many in all. */
export async function selectWorkflows(c: Client, f: InstanceFilter, limit: number): Promise<{ count: number; rows: SelectedWorkflow[] }> {
  const params: unknown[] = [];
  const where = filterClause(f, params);
  const count = await c.query<{ n: number }>(`SELECT count(*)::int AS n FROM workflows WHERE ${where}`, params);
  const rows = await c.query<{ id: string; logic_id: string; version: number; state: string; current_step: string | null }>(
    `SELECT id, logic_id, version, state, current_step FROM workflows WHERE ${where} ORDER BY created_at, id LIMIT ${Number(limit)}`,
    params,
  );
  return {
    count: count.rows[0]!.n,
    rows: rows.rows.map((r) => ({ id: r.id, logicId: r.logic_id, version: r.version, state: r.state, currentStep: r.current_step })),
  };
}
