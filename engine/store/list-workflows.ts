import type { FlowErrorBody, WorkflowState } from '../../contracts/index.ts';
import type { Client } from './tx.ts';
import { filterClause, type StuckReason, type WorkflowFilter } from './workflow-filter.ts';

export type { WorkflowFilter } from './workflow-filter.ts';

/** Where the previous page ended: the last row's (created_at, id), newest first. */
export interface PagePosition {
  /** created_at to the microsecond (a JS Date would cut it to the millisecond and skip rows). */
  createdAt: string;
  id: string;
}

export interface WorkflowListItem {
  id: string;
  logicId: string;
  version: number;
  state: WorkflowState;
  currentStep: string | null;
  error: FlowErrorBody | null;
  correlationId: string | null;
  createdAt: string;
  updatedAt: string;
  /** Why it should be moving and is not; absent when it is not stuck. */
  stuckReason?: StuckReason;
  /** Pass as `after` for the page that follows this row. */
  position: PagePosition;
}

interface Row {
  id: string;
  logic_id: string;
  version: number;
  state: WorkflowState;
  current_step: string | null;
  error: FlowErrorBody | null;
  correlation_id: string | null;
  created_at: Date;
  updated_at: Date;
  position_at: string;
  stuck_reason: StuckReason | null;
}

/**
 * One page of the caller's env's instances, newest first, keyset-paginated on (created_at, id):
 * a page costs the same however deep it is, and rows inserted meanwhile never shift it. Each
 * filter is built by `filterClause()`, the one shared with bulk jobs and the stuck report.
 */
export async function listWorkflows(c: Client, f: WorkflowFilter, limit: number, after: PagePosition | null): Promise<WorkflowListItem[]> {
  const params: unknown[] = [];
  const { where, reason } = filterClause(f, params);
  const page = after === null ? 'true' : `(w.created_at, w.id) < ($${params.push(after.createdAt)}::timestamptz, $${params.push(after.id)}::uuid)`;
  const res = await c.query<Row>(
    `SELECT w.id, w.logic_id, w.version, w.state, w.current_step, w.error, w.correlation_id, w.created_at, w.updated_at,
            to_char(w.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS position_at, ${reason()} AS stuck_reason
       FROM workflows w
      WHERE ${where} AND ${page}
      ORDER BY w.created_at DESC, w.id DESC
      LIMIT ${Number(limit)}`,
    params,
  );
  return res.rows.map((r) => ({
    id: r.id,
    logicId: r.logic_id,
    version: r.version,
    state: r.state,
    currentStep: r.current_step,
    error: r.error,
    correlationId: r.correlation_id,
    createdAt: r.created_at.toISOString(),
    updatedAt: r.updated_at.toISOString(),
    ...(r.stuck_reason === null ? {} : { stuckReason: r.stuck_reason }),
    position: { createdAt: r.position_at, id: r.id },
  }));
}
