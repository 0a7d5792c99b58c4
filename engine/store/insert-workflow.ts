import type { Instance } from '../core/instance.ts';
import type { Transition } from '../core/transition.ts';
import { effectsParam, writeFanOut } from './commit-transition.ts';
import { journalParam } from './journal.ts';
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
  /** Inserted leased to the starting process, as a claim would leave it (migration 0045); the instance must be due now. */
  lease?: { token: string; leaseMs: number } | null;
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
  const i = t.instance;
  // the instance's fields, as insert_started() reads them, and the start's own
  const row = {
    ...i,
    ctx: storedCtx(i.ctx),
    idempotencyKey: key.idempotencyKey,
    runAfterMs: t.runAfterMs,
    callbackUrl: key.callbackUrl ?? null,
    requestHash: key.requestHash ?? null,
    traceParent: key.traceParent ?? null,
    priority: key.priority ?? 0,
    ...(key.lease ? { state: 'processing', leaseToken: key.lease.token, leaseMs: key.lease.leaseMs } : {}),
  };
  // a new row has no outputs yet: every output the instance holds is written, changed or not
  const effects = effectsParam(t, {}, Object.keys(i.ctx.outputs));
  // the first journal row: the instance was created and began (row_version 1)
  const journal = key.initial === undefined ? null : journalParam(1, key.initial, { type: 'begin' }, t);
  // one statement (migration 0042): the row, its first attempt's rows and the journal row
  const res = await c.query<{ id: string; created: boolean; request_hash: string | null }>({
    name: 'flow_insert_started',
    text: 'SELECT id, created, request_hash FROM insert_started($1::jsonb, $2::jsonb, $3::jsonb)',
    values: [JSON.stringify(row), JSON.stringify(effects), journal === null ? null : JSON.stringify(journal)],
  });
  const started = res.rows[0]!;
  if (!started.created) return { id: started.id, created: false, requestHash: started.request_hash };
  await writeFanOut(c, t, {}); // a new instance has no children to cancel
  return { id: started.id, created: true, requestHash: started.request_hash };
}
