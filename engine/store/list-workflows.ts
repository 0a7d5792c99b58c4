import type { FlowErrorBody, WorkflowState } from '../../contracts/index.ts';
import type { Client } from './tx.ts';

export interface WorkflowFilter {
  state?: WorkflowState;
  logicId?: string;
  version?: number;
  correlationId?: string;
  /** Only instances that should be moving and are not (as listStuck: lease expired, deadline overdue, runnable too long). */
  stuck?: boolean;
  /** Created at or after this instant (ISO 8601). */
  from?: string;
  /** Created before this instant (ISO 8601). */
  to?: string;
  /** How long runnable counts as stuck. (Default: 60 000) */
  pendingForMs?: number;
}

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
}

const STUCK = `(
  (w.state IN ('processing', 'compensating') AND w.lease_expires_at < now())
  OR (w.state = 'waiting' AND EXISTS (SELECT 1 FROM timers t WHERE t.workflow_id = w.id AND t.fire_at < now()))
  OR ((w.state = 'pending' OR (w.state = 'waiting' AND w.wakes IS NOT NULL))
      AND w.run_at < now() - $6::float8 * interval '1 millisecond'))`;

/**
 * One page of the caller's env's instances, newest first, keyset-paginated on (created_at, id):
 * a page costs the same however deep it is, and rows inserted meanwhile never shift it. Each
 * filter is a parameter that is either null (off) or compared, so there is one statement.
 */
export async function listWorkflows(c: Client, f: WorkflowFilter, limit: number, after: PagePosition | null): Promise<WorkflowListItem[]> {
  const res = await c.query<Row>(
    `SELECT w.id, w.logic_id, w.version, w.state, w.current_step, w.error, w.correlation_id, w.created_at, w.updated_at,
            to_char(w.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS position_at
       FROM workflows w
      WHERE ($1::text IS NULL OR w.state = $1)
        AND ($2::text IS NULL OR w.logic_id = $2)
        AND ($3::int IS NULL OR w.version = $3)
        AND ($4::text IS NULL OR w.correlation_id = $4)
        AND (NOT $5::bool OR ${STUCK})
        AND ($7::timestamptz IS NULL OR (w.created_at, w.id) < ($7::timestamptz, $8::uuid))
        AND ($10::timestamptz IS NULL OR w.created_at >= $10::timestamptz)
        AND ($11::timestamptz IS NULL OR w.created_at < $11::timestamptz)
      ORDER BY w.created_at DESC, w.id DESC
      LIMIT $9`,
    [
      f.state ?? null,
      f.logicId ?? null,
      f.version ?? null,
      f.correlationId ?? null,
      f.stuck === true,
      f.pendingForMs ?? 60_000,
      after?.createdAt ?? null,
      after?.id ?? null,
      limit,
      f.from ?? null,
      f.to ?? null,
    ],
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
    position: { createdAt: r.position_at, id: r.id },
  }));
}
