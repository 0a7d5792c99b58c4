import type { Instance } from '../core/instance.ts';
import type { Transition } from '../core/transition.ts';
import { effectsParam, writeFanOut } from './commit-transition.ts';
import { insertJournal, journalParam } from './journal.ts';
import { storedCtx } from './rows.ts';
import type { Client } from './tx.ts';

export interface StartKey {
  /** Unique per (env, logicId): a second insert with it for the same definition inserts nothing. */
  idempotencyKey: string | null;
  /** What the key stands for (a hash of the start request), kept to tell a repeat from a misuse. */
  requestHash?: string | null;
  callbackUrl?: string | null;
  /** The instance the first transition began from, for the journal; without it the start is not journalled. */
  initial?: Instance;
  /** The start span's W3C traceparent, kept so every later span of the instance joins its trace (migration 0032). */
  traceParent?: string | null;
  /** Claims take an env's instances of higher priority first (migration 0028). (Default: 0) */
  priority?: number;
}

/**
 * Inserts a new instance together with its first transition (the first step prepared, or pure
 * steps already run). With an idempotency key already used for this definition in this env,
 * inserts nothing and returns the existing instance's id and the request hash it was started
 * with — never an instance of another definition (keys of different logicIds do not meet).
 */
export async function insertWorkflow(
  c: Client,
  t: Transition,
  key: StartKey,
): Promise<{ id: string; created: boolean; requestHash: string | null }> {
  const { idempotencyKey } = key;
  const i = t.instance;
  const res = await c.query<{ id: string }>(
    `INSERT INTO workflows (id, env_id, domain, logic_id, version, logic_hash, state, input, output, current_step, error,
                            generation, ctx, correlation_id, idempotency_key, parent_id, branch_index, run_at, callback_url,
                            request_hash, trace_parent, priority)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
             now() + coalesce($18::float8, 0) * interval '1 millisecond', $19, $20, $21, $22)
     ON CONFLICT (env_id, logic_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
     RETURNING id`,
    [
      i.id,
      i.env,
      i.domain,
      i.logicId,
      i.version,
      i.logicHash,
      i.state,
      JSON.stringify(i.input),
      JSON.stringify(i.output),
      i.currentStep,
      i.error === null ? null : JSON.stringify(i.error),
      i.generation,
      JSON.stringify(storedCtx(i.ctx)),
      i.correlationId,
      idempotencyKey,
      i.parentId,
      i.branchIndex,
      t.runAfterMs,
      key.callbackUrl ?? null,
      key.requestHash ?? null,
      key.traceParent ?? null,
      key.priority ?? 0,
    ],
  );
  if (res.rows.length === 0) {
    const existing = await c.query<{ id: string; request_hash: string | null }>(
      'SELECT id, request_hash FROM workflows WHERE logic_id = $1 AND idempotency_key = $2',
      [i.logicId, idempotencyKey],
    );
    const row = existing.rows[0]!;
    return { id: row.id, created: false, requestHash: row.request_hash };
  }
  // a new row has no outputs yet: every output the instance holds is written, changed or not
  const effects = effectsParam(t, {}, Object.keys(i.ctx.outputs));
  await c.query('SELECT write_effects($1, $2, $3::jsonb)', [i.id, i.env, JSON.stringify(effects)]);
  // the first journal row: the instance was created and began (row_version 1)
  if (key.initial !== undefined) await insertJournal(c, i.env, i.id, journalParam(1, key.initial, { type: 'begin' }, t));
  await writeFanOut(c, t, {}); // a new instance has no children to cancel
  return { id: i.id, created: true, requestHash: key.requestHash ?? null };
}
