import type { StepOutcome } from '../../contracts/index.ts';
import type { AppliedCallback } from '../core/repeated-callback.ts';
import type { Client } from './tx.ts';

/**
 * The completion journalled for attempt `seq` of an instance (migration 0008 journals every event
 * with the decision it led to), and the state that decision left the instance in: what the first
 * delivery of a callback was answered with.
 */
export async function findAppliedCallback(c: Client, workflowId: string, seq: number): Promise<AppliedCallback | null> {
  const res = await c.query<{ outcome: StepOutcome; state: string }>(
    `SELECT event->'outcome' AS outcome, decision->>'state' AS state FROM journal
     WHERE workflow_id = $1 AND event->>'type' = 'callback' AND (event->>'seq')::bigint = $2
     ORDER BY n LIMIT 1`,
    [workflowId, seq],
  );
  return res.rows[0] ?? null;
}
