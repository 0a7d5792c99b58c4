import type { Client } from './tx.ts';

export interface EventIn {
  type: string;
  idempotencyKey: string;
  payload: unknown;
}

/** A message an event delivered to one instance through a message trigger, with how it went. */
export interface EventDelivery {
  workflowId: string;
  message: string;
  /** `delivered`: its waitFor step took it; `buffered`: it waits for the step; `refused`: see `code`. */
  status: 'delivered' | 'buffered' | 'refused';
  code?: string;
}

/** What a key already recorded in this env holds: the first event's type and whether the payload matches. */
export interface RecordedEvent {
  type: string;
  samePayload: boolean;
  started: string[];
  delivered: EventDelivery[];
}

/**
 * Records an event in the caller's env. Returns null when it is new; when the key is already
 * taken, inserts nothing and returns what the first event was and the instances it started.
 * A concurrent ingest of the same key waits on the key's row lock, then sees the first one's work.
 */
export async function recordEvent(c: Client, env: string, e: EventIn): Promise<RecordedEvent | null> {
  const payload = JSON.stringify(e.payload ?? null);
  const ins = await c.query(
    `INSERT INTO events (env_id, idempotency_key, type, payload) VALUES ($1, $2, $3, $4::jsonb)
     ON CONFLICT (env_id, idempotency_key) DO NOTHING RETURNING 1`,
    [env, e.idempotencyKey, e.type, payload],
  );
  if (ins.rows.length === 1) return null;
  const res = await c.query<RecordedEvent>(
    `SELECT type, payload = $2::jsonb AS "samePayload", started::text[] AS started, delivered FROM events WHERE idempotency_key = $1`,
    [e.idempotencyKey, payload],
  );
  return res.rows[0]!;
}

/** Remembers which instances an event started and what it delivered (migration 0036), so a repeat of its key answers the same. */
export async function setEventOutcome(c: Client, idempotencyKey: string, ids: string[], delivered: EventDelivery[]): Promise<void> {
  await c.query('UPDATE events SET started = $2::uuid[], delivered = $3::jsonb WHERE idempotency_key = $1', [idempotencyKey, ids, JSON.stringify(delivered)]);
}

/** The logicIds with a trigger on `type` in the caller's env (registered at publish), in a stable order. */
export async function triggeredLogicIds(c: Client, type: string): Promise<string[]> {
  const res = await c.query<{ logic_id: string }>('SELECT logic_id FROM triggers WHERE event = $1 ORDER BY logic_id', [type]);
  return res.rows.map((r) => r.logic_id);
}
