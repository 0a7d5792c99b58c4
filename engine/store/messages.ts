import type { JsonValue } from '../core/instance.ts';
import { TERMINAL_STATES } from '../../contracts/states.ts';
import type { Client } from './tx.ts';

const TERMINAL = `(${[...TERMINAL_STATES].map((st) => `'${st}'`).join(', ')})`;

/**
 * Messages delivered to instances (migration 0034): one row per delivery, keyed by the caller's
 * Idempotency-Key within the instance. Every caller holds the instance's row lock, so reads and
 * writes here are serialised per instance.
 */

/** The answer a delivery got, given again to a repeat of its key. */
export interface DeliveryAnswer {
  status: number;
  body: JsonValue;
}

export interface MessageRow {
  env: string;
  workflowId: string;
  key: string;
  name: string;
  payload: JsonValue;
  state: 'buffered' | 'consumed';
  answer: DeliveryAnswer;
}

/**
 * Takes the instance's row lock, in a statement of its own: a read that waited for the lock in the
 * same statement would see the row as committed since (Postgres re-reads a locked row) but its
 * step outputs (a subquery) as of before, so a hand-over racing another would run on stale outputs.
 * The caller reads the instance after this, in a fresh statement. False: no such instance.
 */
export async function lockWorkflow(c: Client, id: string): Promise<boolean> {
  const res = await c.query('SELECT 1 FROM workflows WHERE id = $1 FOR NO KEY UPDATE', [id]);
  return res.rowCount === 1;
}

export async function findDelivery(c: Client, workflowId: string, key: string): Promise<DeliveryAnswer | null> {
  const res = await c.query<{ answer_status: number; answer: JsonValue }>(
    'SELECT answer_status, answer FROM workflow_messages WHERE workflow_id = $1 AND idempotency_key = $2',
    [workflowId, key],
  );
  const row = res.rows[0];
  return row === undefined ? null : { status: row.answer_status, body: row.answer };
}

export async function countBuffered(c: Client, workflowId: string): Promise<number> {
  const res = await c.query<{ n: number }>(`SELECT count(*)::int AS n FROM workflow_messages WHERE workflow_id = $1 AND state = 'buffered'`, [workflowId]);
  return res.rows[0]!.n;
}

/** Writes a delivery; returns its id (arrival order). */
export async function insertMessage(c: Client, m: MessageRow): Promise<string> {
  const res = await c.query<{ id: string }>(
    `INSERT INTO workflow_messages (env_id, workflow_id, idempotency_key, name, payload, state, answer_status, answer, consumed_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $6 = 'consumed' THEN now() END) RETURNING id`,
    [m.env, m.workflowId, m.key, m.name, JSON.stringify(m.payload), m.state, m.answer.status, JSON.stringify(m.answer.body)],
  );
  return res.rows[0]!.id;
}

/** The instance's oldest buffered message of `name`, or null. */
export async function oldestBuffered(c: Client, workflowId: string, name: string): Promise<{ id: string; payload: JsonValue } | null> {
  const res = await c.query<{ id: string; payload: JsonValue }>(
    `SELECT id, payload FROM workflow_messages WHERE workflow_id = $1 AND name = $2 AND state = 'buffered' ORDER BY id LIMIT 1`,
    [workflowId, name],
  );
  return res.rows[0] ?? null;
}

export async function markConsumed(c: Client, id: string): Promise<void> {
  await c.query(`UPDATE workflow_messages SET state = 'consumed', consumed_at = now() WHERE id = $1`, [id]);
}

/**
 * Instances parked on a waitFor step for which a buffered message of its name waits (as the
 * scheduler, across envs): a hand-over that a crash or a race left undone. The step is read from
 * the instance's pinned version, as the overview reads its decisions.
 */
export async function parkedWithBuffered(c: Client, limit: number): Promise<{ env: string; workflowId: string }[]> {
  const res = await c.query<{ env_id: string; id: string }>(
    `SELECT DISTINCT w.env_id, w.id
       FROM workflow_messages m
       JOIN workflows w ON w.id = m.workflow_id
       JOIN logic_versions v ON v.env_id = w.env_id AND v.logic_id = w.logic_id AND v.version = w.version
      WHERE m.state = 'buffered' AND w.state = 'waiting'
        AND v.doc->'steps'->w.current_step->>'kind' = 'waitFor'
        AND v.doc->'steps'->w.current_step->>'message' = m.name
      LIMIT $1`,
    [limit],
  );
  return res.rows.map((r) => ({ env: r.env_id, workflowId: r.id }));
}

/** Marks `unread` the buffered messages of ended instances: no step will take them now. */
export async function setAsideUnread(c: Client): Promise<void> {
  await c.query(
    `UPDATE workflow_messages m SET state = 'unread' FROM workflows w
      WHERE m.state = 'buffered' AND w.id = m.workflow_id AND w.state IN ${TERMINAL}`,
  );
}
