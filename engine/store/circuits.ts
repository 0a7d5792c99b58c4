import type { Client } from './tx.ts';

/** A handler profile's circuit in one env, as every node sees it (migration 0028). */
export interface CircuitRow {
  env: string;
  handler: string;
  state: 'closed' | 'open';
  /** Consecutive failed calls, across all nodes. */
  failures: number;
  /** The last failure, e.g. `HTTP_503: POST http://ledger/… answered 503`. */
  reason: string | null;
  openedAt: string | null;
  /** When an open circuit lets one probe call through. */
  openUntil: string | null;
  /** Milliseconds until then on the database clock (≤ 0: a probe may go), null when closed. */
  waitMs: number | null;
}

const COLUMNS = `env_id AS env, handler, state, failures, reason, opened_at, open_until,
  extract(epoch FROM greatest(open_until, probe_until) - now()) * 1000 AS wait_ms`;

interface Row {
  env: string;
  handler: string;
  state: 'closed' | 'open';
  failures: number;
  reason: string | null;
  opened_at: Date | null;
  open_until: Date | null;
  wait_ms: number | null;
}

function toCircuit(r: Row): CircuitRow {
  return {
    env: r.env,
    handler: r.handler,
    state: r.state,
    failures: r.failures,
    reason: r.reason,
    openedAt: r.opened_at?.toISOString() ?? null,
    openUntil: r.open_until?.toISOString() ?? null,
    waitMs: r.state === 'open' && r.wait_ms !== null ? Number(r.wait_ms) : null,
  };
}

/**
 * Counts a failed call. The count reaching `threshold` opens a closed circuit until `openMs` from
 * now; a failed probe (one was in flight) opens it again for as long. `changed`: this failure
 * opened or reopened it. One statement: two nodes failing at once both count.
 */
export async function circuitFailed(
  c: Client,
  args: { env: string; handler: string; threshold: number; openMs: number; reason: string },
): Promise<{ circuit: CircuitRow; changed: boolean }> {
  const res = await c.query<Row & { changed: boolean }>(
    `INSERT INTO handler_circuits AS h (env_id, handler, state, failures, reason, opened_at, open_until)
     VALUES ($1, $2, CASE WHEN $3 <= 1 THEN 'open' ELSE 'closed' END, 1, $5,
             CASE WHEN $3 <= 1 THEN now() END, CASE WHEN $3 <= 1 THEN now() + $4::float8 * interval '1 millisecond' END)
     ON CONFLICT (env_id, handler) DO UPDATE SET
       failures = h.failures + 1,
       reason = EXCLUDED.reason,
       state = CASE WHEN h.failures + 1 >= $3 THEN 'open' ELSE h.state END,
       opened_at = CASE WHEN h.state = 'closed' AND h.failures + 1 >= $3 THEN now() ELSE h.opened_at END,
       open_until = CASE WHEN h.failures + 1 >= $3 AND (h.state = 'closed' OR h.probe_until IS NOT NULL)
                         THEN now() + $4::float8 * interval '1 millisecond' ELSE h.open_until END,
       probe_until = NULL,
       updated_at = now()
     RETURNING ${COLUMNS}, (state = 'open' AND open_until = now() + $4::float8 * interval '1 millisecond') AS changed`,
    [args.env, args.handler, args.threshold, args.openMs, args.reason],
  );
  const row = res.rows[0]!;
  return { circuit: toCircuit(row), changed: row.changed };
}

/** A call went through (the service answered): the count starts over and an open circuit closes. True when it was open. */
export async function circuitSucceeded(c: Client, args: { env: string; handler: string }): Promise<boolean> {
  const res = await c.query<{ state: string }>(
    `WITH old AS (SELECT state FROM handler_circuits WHERE env_id = $1 AND handler = $2 AND (failures > 0 OR state = 'open') FOR UPDATE)
     UPDATE handler_circuits h SET state = 'closed', failures = 0, reason = NULL, opened_at = NULL, open_until = NULL,
       probe_until = NULL, updated_at = now()
     FROM old WHERE h.env_id = $1 AND h.handler = $2 RETURNING old.state`,
    [args.env, args.handler],
  );
  return res.rows[0]?.state === 'open';
}

/**
 * Lets one call through an open circuit whose time is up (half-open), fencing the others out for
 * `probeMs` (the call's timeout: a probe whose node died does not hold the circuit for ever).
 * Null: the probe is this caller's. Else the circuit as it is, its `waitMs` until the next chance.
 */
export async function claimProbe(c: Client, args: { env: string; handler: string; probeMs: number }): Promise<CircuitRow | null> {
  const res = await c.query<Row & { probe: boolean }>(
    `WITH probe AS (
       UPDATE handler_circuits SET probe_until = now() + $3::float8 * interval '1 millisecond', updated_at = now()
       WHERE env_id = $1 AND handler = $2 AND state = 'open' AND open_until <= now() AND (probe_until IS NULL OR probe_until <= now())
       RETURNING 1)
     SELECT ${COLUMNS}, EXISTS (SELECT 1 FROM probe) AS probe FROM handler_circuits WHERE env_id = $1 AND handler = $2`,
    [args.env, args.handler, args.probeMs],
  );
  const row = res.rows[0];
  if (row === undefined || row.probe || row.state === 'closed') return null;
  return toCircuit(row);
}

/**
 * A circuit closed: the env's instances held on an open circuit are due now, instead of waiting
 * out their hold. Those held on another handler's still open circuit are held again when claimed.
 * A hold committed after this (decided while the probe was out) waits its end: at most the probe's timeout. Read through the held rows' index (migration 0028);
 * an instance claimed meanwhile is no longer pending and is left alone.
 */
export async function wakeCircuitHeld(c: Client, args: { env: string }): Promise<number> {
  const res = await c.query(
    `UPDATE workflows w SET run_at = now() FROM step_runs s
     WHERE s.state = 'failed' AND s.error->>'code' = 'FLOW_CIRCUIT_OPEN' AND s.env_id = $1
       AND w.id = s.workflow_id AND w.state = 'pending' AND w.run_at > now() AND s.seq = (w.ctx->'running'->>'seq')::int - 1`,
    [args.env],
  );
  return res.rowCount ?? 0;
}

/** Every circuit that is open or counting failures, in the envs the transaction sees (all, as the scheduler). */
export async function readCircuits(c: Client): Promise<CircuitRow[]> {
  const res = await c.query<Row>(`SELECT ${COLUMNS} FROM handler_circuits WHERE state = 'open' OR failures > 0 ORDER BY env_id, handler`);
  return res.rows.map(toCircuit);
}
