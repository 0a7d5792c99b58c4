import type { WorkflowState } from '../../contracts/index.ts';
import { type AttributeCondition, attributeConditions } from '../../contracts/api/attributes.ts';
import { instantMs } from '../core/attributes.ts';

/**
 * Which instances a listing, a bulk job or a stuck report covers: the one filter every caller
 * passes (the API's `GET /workflows`, a bulk job's filter, `listStuck`), built into SQL in one
 * place so the three can never disagree.
 */
export interface WorkflowFilter {
  state?: WorkflowState | string;
  logicId?: string;
  version?: number;
  /** The step it is at. */
  step?: string;
  /** Only instances that have not ended (pending, processing, waiting, compensating). */
  live?: boolean;
  correlationId?: string;
  /** The parent instance: only its children. */
  parent?: string;
  /** Only instances that should be moving and are not: `stuckReason` names why (docs/operations.md, "Runbook: stuck instances"). */
  stuck?: boolean;
  /** Created at or after this instant (ISO 8601). */
  from?: string;
  /** Created before this instant (ISO 8601). */
  to?: string;
  /** Search attributes, as AttributeFilters takes them: `{ accountId: 'acct-2', 'amount.gte': '100' }`. */
  attributes?: Readonly<Record<string, string>>;
  /** Only instances with a recorded SLA breach (migration 0031). */
  slaBreached?: boolean;
  /** How long runnable counts as stuck. (Default: 60 000) */
  pendingForMs?: number;
  /** How long parked on a 202 without a `timeoutMs` counts as stuck. (Default: 86 400 000, a day) */
  parkedForMs?: number;
}

/** Why an instance that should be moving is not; `stuckReason()` returns one of these or NULL. */
export const STUCK_REASONS = [
  // held by a worker whose lease ran out
  'lease_expired',
  // a timer overdue, named by what it ends: a decision's deadline, a 202's timeoutMs, a delay, a child's end
  'deadline_passed',
  'callback_overdue',
  'delay_overdue',
  'children_overdue',
  // runnable (pending, compensating and unheld, or woken and not yet claimed) for longer than pendingForMs
  'pending_too_long',
  // parked on a 202 that set no timeoutMs, for longer than parkedForMs: no timer will ever end it
  'callback_parked',
  // held without using an attempt (core/hold.ts): its handler's circuit is open, or the service answered 429/503
  'circuit_open',
  'throttled',
] as const;
export type StuckReason = (typeof STUCK_REASONS)[number];

/** When an instance counts as stuck; each call may override them. */
export interface StuckThresholds {
  /** How long runnable and unclaimed counts as stuck. (Default: 60 000, a minute) */
  pendingForMs: number;
  /** How long parked on a 202 without a `timeoutMs` counts as stuck. (Default: 86 400 000, a day) */
  parkedForMs: number;
}
export const STUCK_DEFAULTS: StuckThresholds = { pendingForMs: 60_000, parkedForMs: 86_400_000 };

/**
 * The one definition of "stuck", over the `workflows` row aliased `w`: each reason with the
 * condition that gives it, first that holds wins. `pendingMs` and `parkedMs` are placeholders
 * (`$n`). A stuck listing decides it only for `stuckCandidates()`.
 */
function stuckConditions(w: string, pendingMs: string, parkedMs: string): [reasonSql: string, condition: string][] {
  // an SLA timer (migration 0031) ends nothing: overdue, it says nothing about being stuck
  const overdue = `SELECT t.workflow_id FROM timers t WHERE t.fire_at < now() AND t.purpose <> 'sla'`;
  const purpose = `(SELECT CASE t.purpose WHEN 'deadline' THEN 'deadline_passed' WHEN 'callback' THEN 'callback_overdue' ELSE t.purpose || '_overdue' END
                      FROM timers t WHERE t.workflow_id = ${w}.id AND t.fire_at < now() AND t.purpose <> 'sla' ORDER BY t.fire_at LIMIT 1)`;
  return [
    [`'lease_expired'`, `${w}.state IN ('processing', 'compensating') AND ${w}.lease_expires_at < now()`],
    [purpose, `${w}.state = 'waiting' AND ${w}.id IN (${overdue})`],
    [
      `'pending_too_long'`,
      `${w}.run_at < now() - ${pendingMs}::float8 * interval '1 millisecond'
       AND (${w}.state = 'pending' OR (${w}.state = 'compensating' AND ${w}.lease_expires_at IS NULL) OR (${w}.state = 'waiting' AND ${w}.wakes IS NOT NULL))`,
    ],
    [
      `'callback_parked'`,
      `${w}.state = 'waiting' AND ${w}.updated_at < now() - ${parkedMs}::float8 * interval '1 millisecond' AND ${w}.wakes IS NULL
       AND NOT EXISTS (SELECT 1 FROM timers t WHERE t.workflow_id = ${w}.id AND t.purpose <> 'sla')
       AND (SELECT v.doc->'steps'->${w}.current_step->>'kind' FROM logic_versions v
             WHERE v.env_id = ${w}.env_id AND v.logic_id = ${w}.logic_id AND v.version = ${w}.version) IN ('proxy', 'http')`,
    ],
    [`'circuit_open'`, heldOn(w, 'FLOW_CIRCUIT_OPEN')],
    [`'throttled'`, heldOn(w, 'FLOW_THROTTLED')],
  ];
}

/** The instance waits out a hold: its last row is a held one (the row before its running attempt's, migration 0028). */
function heldOn(w: string, code: string): string {
  return `${w}.state = 'pending' AND EXISTS (SELECT 1 FROM step_runs s WHERE s.workflow_id = ${w}.id
    AND s.seq = (${w}.ctx->'running'->>'seq')::int - 1 AND s.state = 'failed' AND s.error->>'code' = '${code}')`;
}

/** The stuck reason of the row aliased `w` as a SQL expression: one of `STUCK_REASONS`, or NULL. */
export function stuckReason(w: string, pendingMs: string, parkedMs: string): string {
  return `(CASE ${stuckConditions(w, pendingMs, parkedMs)
    .map(([reason, when]) => `WHEN ${when} THEN ${reason}`)
    .join(' ')} END)`;
}

/**
 * The ids that may be stuck, each branch read from an index (workflows_leased, timers_due,
 * workflows_runnable, and for parked callbacks workflows_live, from the proxy and http steps of
 * each version); the exact reason is then decided for these rows only. Deciding it for every live
 * row instead took 0.7 s at 200,000 instances parked on a delay.
 */
function stuckCandidates(pendingMs: string, parkedMs: string): string {
  return `SELECT c.id FROM workflows c WHERE c.state IN ('processing', 'compensating') AND c.lease_expires_at < now()
    UNION ALL SELECT t.workflow_id FROM timers t WHERE t.fire_at < now() AND t.purpose <> 'sla'
    UNION ALL SELECT c.id FROM workflows c
      WHERE (c.state IN ('pending', 'compensating') OR (c.state = 'waiting' AND c.wakes IS NOT NULL))
        AND c.run_at < now() - ${pendingMs}::float8 * interval '1 millisecond'
    UNION ALL SELECT c.id FROM logic_versions v CROSS JOIN LATERAL jsonb_each(v.doc->'steps') s(name, def)
      JOIN workflows c ON c.env_id = v.env_id AND c.logic_id = v.logic_id AND c.version = v.version AND c.state = 'waiting' AND c.current_step = s.name
      WHERE s.def->>'kind' IN ('proxy', 'http') AND c.wakes IS NULL AND c.updated_at < now() - ${parkedMs}::float8 * interval '1 millisecond'
    UNION ALL SELECT h.workflow_id FROM step_runs h WHERE h.state = 'failed' AND h.error->>'code' IN ('FLOW_THROTTLED', 'FLOW_CIRCUIT_OPEN')`;
}

/** True when the row aliased `w` is stuck. */
function isStuck(w: string, pendingMs: string, parkedMs: string): string {
  return `(${w}.id IN (${stuckCandidates(pendingMs, parkedMs)}) AND ${stuckReason(w, pendingMs, parkedMs)} IS NOT NULL)`;
}

/**
 * The filter's WHERE clause over `workflows` aliased `w`, every value pushed to `params` as a
 * placeholder. `reason()` is the row's stuck reason under the filter's thresholds, for a SELECT
 * list (its placeholders are pushed on first use: Postgres refuses a parameter no statement uses).
 */
export function filterClause(f: WorkflowFilter, params: unknown[]): { where: string; reason: () => string } {
  const at = (v: unknown) => {
    params.push(v);
    return `$${params.length}`;
  };
  let thresholds: [string, string] | undefined;
  const limits = () => {
    thresholds ??= [at(f.pendingForMs ?? STUCK_DEFAULTS.pendingForMs), at(f.parkedForMs ?? STUCK_DEFAULTS.parkedForMs)];
    return thresholds;
  };
  const reason = () => stuckReason('w', ...limits());
  const where: string[] = [];
  if (f.state !== undefined) where.push(`w.state = ${at(f.state)}`);
  if (f.logicId !== undefined) where.push(`w.logic_id = ${at(f.logicId)}`);
  if (f.version !== undefined) where.push(`w.version = ${at(f.version)}::int`);
  if (f.step !== undefined) where.push(`w.current_step = ${at(f.step)}`);
  if (f.live === true) where.push(`w.state IN ('pending', 'processing', 'waiting', 'compensating')`);
  if (f.correlationId !== undefined) where.push(`w.correlation_id = ${at(f.correlationId)}`);
  if (f.parent !== undefined) where.push(`w.parent_id = ${at(f.parent)}::uuid`);
  if (f.from !== undefined) where.push(`w.created_at >= ${at(f.from)}::timestamptz`);
  if (f.to !== undefined) where.push(`w.created_at < ${at(f.to)}::timestamptz`);
  for (const [name, conditions] of byName(attributeConditions(f.attributes ?? {}))) where.push(attributeMatch(name, conditions, at));
  if (f.slaBreached === true) where.push(`w.id IN (SELECT b.workflow_id FROM sla_breaches b)`);
  if (f.slaBreached === false) where.push(`w.id NOT IN (SELECT b.workflow_id FROM sla_breaches b)`);
  if (f.stuck === true) where.push(isStuck('w', ...limits()));
  if (f.stuck === false) where.push(`${reason()} IS NULL`);
  return { where: where.length === 0 ? 'true' : where.join(' AND '), reason };
}

function byName(conditions: AttributeCondition[]): Map<string, AttributeCondition[]> {
  const out = new Map<string, AttributeCondition[]>();
  for (const c of conditions) out.set(c.name, [...(out.get(c.name) ?? []), c]);
  return out;
}

const NUMBER = /^-?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
const SQL_OP = { eq: '=', gt: '>', gte: '>=', lt: '<', lte: '<=' } as const;

/**
 * The instances whose attribute `name` meets every condition: one range scan of an index of
 * workflow_attributes (migration 0031), led by (env_id, name), its ids then looked up by primary
 * key, as the correlationId filter looks up its own. A value is compared in the column of the type
 * it reads as (core/attributes.ts types stored values the same way): equality looks in each column
 * the value could be in; a bound compares as a number, else as a time, else as text.
 */
function attributeMatch(name: string, conditions: AttributeCondition[], at: (v: unknown) => string): string {
  const terms: string[] = [];
  for (const c of conditions) {
    const num = NUMBER.test(c.value) && Number.isFinite(Number(c.value)) ? Number(c.value) : null;
    const ms = instantMs(c.value);
    const time = ms === null ? null : new Date(ms).toISOString();
    const op = SQL_OP[c.op];
    if (c.op === 'eq') {
      const any = [`a.text_value = ${at(c.value)}`];
      if (num !== null) any.push(`a.num_value = ${at(num)}::float8`);
      if (time !== null) any.push(`a.time_value = ${at(time)}::timestamptz`);
      terms.push(any.length === 1 ? any[0]! : `(${any.join(' OR ')})`);
    } else if (num !== null) terms.push(`a.num_value ${op} ${at(num)}::float8`);
    else if (time !== null) terms.push(`a.time_value ${op} ${at(time)}::timestamptz`);
    else terms.push(`a.text_value ${op} ${at(c.value)}`);
  }
  return `w.id IN (SELECT a.workflow_id FROM workflow_attributes a WHERE a.name = ${at(name)} AND ${terms.join(' AND ')})`;
}
