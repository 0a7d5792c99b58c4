import type { Tombstone } from '../../contracts/erasure.ts';
import type { Client } from './tx.ts';

/**
 * Replaces an instance's data with tombstones: its input and output, its steps' outputs, its
 * attempts' inputs and outputs (host-call records included: they are a func step's output), and
 * its journal's events and decisions, the payloads of messages delivered to it; its search
 * attributes, read off those, are removed. What it was and when stay: states, step names, attempt
 * numbers, idempotency keys, times, error codes (their message says when it was erased: an error
 * keeps the shape every reader expects), the audit. `updated_at` stays too, so erasure
 * does not restart the retention clock. The journal is written as the scheduler: requests may
 * only append to it.
 */
export async function eraseInstance(c: Client, id: string, t: Tombstone): Promise<void> {
  const tomb = JSON.stringify(t);
  await c.query(
    `UPDATE workflows SET input = $2::jsonb, output = CASE WHEN output IS NULL THEN NULL ELSE $2::jsonb END,
            error = CASE WHEN error IS NULL THEN NULL ELSE $2::jsonb || jsonb_build_object('code', error->'code', 'message', 'erased at ' || ($2::jsonb->>'at')) END,
            row_version = row_version + 1
     WHERE id = $1`,
    [id, tomb],
  );
  await c.query('UPDATE workflow_outputs SET output = $2::jsonb WHERE workflow_id = $1', [id, tomb]);
  // search attributes are read off the input and outputs: they go with them
  await c.query('DELETE FROM workflow_attributes WHERE workflow_id = $1', [id]);
  // messages delivered to it: their payloads (a step's output, or never taken); names and keys stay
  await c.query('UPDATE workflow_messages SET payload = $2::jsonb WHERE workflow_id = $1', [id, tomb]);
  await c.query(
    `UPDATE step_runs SET input = CASE WHEN input IS NULL THEN NULL ELSE $2::jsonb END,
            output = CASE WHEN output IS NULL THEN NULL ELSE $2::jsonb END,
            error = CASE WHEN error IS NULL THEN NULL ELSE $2::jsonb || jsonb_build_object('code', error->'code', 'message', 'erased at ' || ($2::jsonb->>'at')) END
     WHERE workflow_id = $1 AND born = (SELECT created_at FROM workflows WHERE id = $1)`,
    [id, tomb],
  );
  const prevRole = (await c.query<{ role: string }>("SELECT current_setting('role') AS role")).rows[0]!.role;
  await c.query("SELECT set_config('role', 'flow_engine', true)");
  await c.query(
    `UPDATE journal SET event = $2::jsonb || jsonb_build_object('type', event->'type'),
            decision = $2::jsonb || jsonb_build_object('state', decision->'state', 'cause', decision->'cause', 'currentStep', decision->'currentStep'),
            initial = CASE WHEN jsonb_typeof(initial) = 'object' THEN initial || jsonb_build_object('input', $2::jsonb) ELSE initial END
     WHERE workflow_id = $1`,
    [id, tomb],
  );
  await c.query("SELECT set_config('role', $1, true)", [prevRole]);
}
