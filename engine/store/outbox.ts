import type { Client } from './tx.ts';

/** An outbox row as the relay delivers it. */
export interface OutboxRow {
  id: string;
  env_id: string;
  workflow_id: string | null;
  kind: 'event' | 'callback';
  topic: string;
  payload: unknown;
  idempotency_key: string;
  /** Attempts made before this one. */
  attempts: number;
  /** Where a callback row goes; null for event rows. */
  url: string | null;
}

/**
 * Claims up to `limit` due rows (database clock) for delivery: locks them with SKIP LOCKED, so
 * several relays share the work, and pushes their next_attempt_at `leaseMs` ahead, so no other
 * relay takes them while this one delivers outside the transaction. A relay that dies mid-delivery
 * leaves the row due again once the lease has passed: delivery is at least once, and the row's
 * idempotency key lets the receiver drop the repeat. Event rows are claimed only when the caller
 * has somewhere to send them.
 */
export async function claimDueOutbox(c: Client, opts: { limit: number; leaseMs: number; events: boolean }): Promise<OutboxRow[]> {
  const res = await c.query<OutboxRow>(
    `UPDATE outbox o SET next_attempt_at = now() + $2::float8 * interval '1 millisecond'
     FROM (SELECT id FROM outbox
           WHERE delivered_at IS NULL AND failed_at IS NULL AND next_attempt_at <= statement_timestamp() AND (kind = 'callback' OR $3)
           ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED) due
     WHERE o.id = due.id
     RETURNING o.id, o.env_id, o.workflow_id, o.kind, o.topic, o.payload, o.idempotency_key, o.attempts, o.url`,
    [opts.limit, opts.leaseMs, opts.events],
  );
  return res.rows;
}

/** What became of one delivery attempt. */
export type DeliveryResult =
  | { outcome: 'delivered' }
  | { outcome: 'retry'; delayMs: number; error: string }
  | { outcome: 'failed'; error: string };

/**
 * Records one attempt. Only a row still undecided changes: a relay whose lease ran out and whose
 * row another relay already settled cannot undo that.
 */
export async function recordDelivery(c: Client, id: string, r: DeliveryResult): Promise<void> {
  const undecided = 'WHERE id = $1 AND delivered_at IS NULL AND failed_at IS NULL';
  if (r.outcome === 'delivered') {
    await c.query(`UPDATE outbox SET attempts = attempts + 1, delivered_at = now(), last_error = NULL ${undecided}`, [id]);
  } else if (r.outcome === 'retry') {
    await c.query(
      `UPDATE outbox SET attempts = attempts + 1, last_error = $2,
              next_attempt_at = now() + $3::float8 * interval '1 millisecond' ${undecided}`,
      [id, r.error, r.delayMs],
    );
  } else {
    await c.query(`UPDATE outbox SET attempts = attempts + 1, failed_at = now(), last_error = $2 ${undecided}`, [id, r.error]);
  }
}

/** Test clock: brings every undelivered row's next attempt `ms` closer. */
export async function advanceOutbox(c: Client, ms: number): Promise<void> {
  await c.query(
    `UPDATE outbox SET next_attempt_at = next_attempt_at - $1::float8 * interval '1 millisecond'
     WHERE delivered_at IS NULL AND failed_at IS NULL`,
    [ms],
  );
}
