import type { Instance } from '../core/instance.ts';
import type { MigrateEvent } from '../core/journal.ts';
import type { Transition } from '../core/transition.ts';
import { insertJournal, journalParam } from './journal.ts';
import { storedCtx, type Stored } from './rows.ts';
import type { Client } from './tx.ts';

/**
 * Writes a migration (core/migrate.ts) of an instance the caller read under its row lock: the
 * row re-pinned to the target version with its renamed step and ctx, the outputs and the SLA
 * timers of renamed steps renamed, and the journal row — guarded by row_version and state like commit_transition(), so a worker or verb that
 * moved the row first makes this write nothing (false). Not through commit_transition(): a move
 * changes no state and must keep what that function resets — the row's `run_at` (a retry's
 * backoff) and its `wakes` (a timer fired for a parked instance not yet claimed).
 */
export async function migrateWorkflow(c: Client, from: Stored, t: Transition, event: MigrateEvent): Promise<boolean> {
  const to: Instance = t.instance;
  const res = await c.query(
    `UPDATE workflows SET version = $3, logic_hash = $4, current_step = $5, ctx = $6::jsonb,
            row_version = row_version + 1, updated_at = now()
      WHERE id = $1 AND row_version = $2 AND state = $7`,
    [to.id, from.rowVersion, to.version, to.logicHash, to.currentStep, JSON.stringify(storedCtx(to.ctx)), from.instance.state],
  );
  if (res.rowCount !== 1) return false;
  // a valid rename map never renames a step to a name another step of the instance holds (renameProblems)
  for (const [old, now] of Object.entries(event.renames)) {
    if (old === now) continue;
    await c.query('UPDATE workflow_outputs SET step = $3 WHERE workflow_id = $1 AND step = $2', [to.id, old, now]);
    // a step's SLA timer names its step, and breaches only while the instance stands on that
    // name (fire_due_timers()): under the old name it would never breach again
    await c.query(
      `UPDATE timers SET payload = jsonb_set(payload, '{step}', to_jsonb($3::text)) WHERE workflow_id = $1 AND purpose = 'sla' AND payload->>'step' = $2`,
      [to.id, old, now],
    );
  }
  await insertJournal(c, to.env, to.id, journalParam(from.rowVersion + 1, from.instance, event, t));
  return true;
}
