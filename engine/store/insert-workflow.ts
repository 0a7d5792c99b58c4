import type { WorkflowRecord } from '../../contracts/index.ts';
import type { Instance } from '../core/instance.ts';
import type { Transition } from '../core/transition.ts';
import { effectsParam, writeFanOut } from './commit-transition.ts';
import { journalParam } from './journal.ts';
import { storedCtx } from './rows.ts';
import type { Db } from './db.ts';
import { type Client, inEnv, type Queryable } from './tx.ts';

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
  /**
   * Inserted leased to the starting process, as a claim would leave it (migration 0045); the
   * instance must be due now. No claim loop is told of it: its starter runs it.
   */
  lease?: { token: string; leaseMs: number } | null;
  /**
   * The caller tells every node's claim loop of the instance once it has committed
   * (runtime/work-announcer.ts), so the insert sends no NOTIFY of its own: a transaction that
   * notifies commits only after the one before it has flushed. (Default: false, the insert notifies)
   */
  announced?: boolean;
  /**
   * The version the first transition was computed from, as the start's lookup found it: the
   * insert checks it is still what a lookup would find (migration 0046), and is then a
   * statement that needs no transaction of the caller's.
   */
  pin?: StartPin;
  /** With a `pin`: answer the instance's WorkflowRecord too, read in the same statement (migration 0047). */
  withRecord?: boolean;
  /**
   * With a `pin`, how its statement is sent: the engine's start batcher, which sends the starts
   * that arrive together as one (migration 0052). (Default: `insertPinned` on the pool)
   */
  send?: (params: PinnedParams) => Promise<PinnedRow | null>;
}

/** A pinned start's parameters, JSON each: the row, its first attempt's rows, its journal row (or null), its pin. */
export type PinnedParams = readonly [string, string, string | null, string];

/** What a pinned start answers: the instance (new, or the one its idempotency key found), or null where its version moved. */
export interface PinnedRow {
  id: string;
  created: boolean;
  request_hash: string | null;
  record: WorkflowRecord | null;
}

/** A pinned start in a statement of its own (migrations 0046, 0047). */
export async function insertPinned(q: Queryable, params: PinnedParams): Promise<PinnedRow | null> {
  const res = await q.query<PinnedRow>({
    name: 'flow_insert_pinned',
    text: 'SELECT id, created, request_hash, record FROM insert_started($1::jsonb, $2::jsonb, $3::jsonb, $4::jsonb)',
    values: [...params],
  });
  return res.rows[0] ?? null;
}

/** Pinned starts in one statement and one transaction, each as it would be alone (migration 0052); answers each in its place. */
export async function insertPinnedBatch(q: Queryable, batch: readonly PinnedParams[]): Promise<(PinnedRow | null)[]> {
  // the parameters are joined as text, not re-encoded
  const res = await q.query<PinnedRow & { i: number }>({
    name: 'flow_insert_started_batch',
    text: 'SELECT i, id, created, request_hash, record FROM insert_started_batch($1::jsonb)',
    values: [`[${batch.map(([row, effects, journal, pin]) => `[${row},${effects},${journal ?? 'null'},${pin}]`).join(',')}]`],
  });
  const rows: (PinnedRow | null)[] = batch.map(() => null);
  for (const { i, ...row } of res.rows) rows[i] = row;
  return rows;
}

/** A start's version: `version` as the request asked (null: the highest active), `hash` the one found. */
export interface StartPin {
  logicId: string;
  version: number | null;
  hash: string;
}

/**
 * Inserts a new instance together with its first transition (the first step prepared, or pure
 * steps already run). With an idempotency key already used for this definition in this env,
 * inserts nothing and returns the existing instance's id and the request hash it was started
 * with — never an instance of another definition (keys of different logicIds do not meet).
 *
 * Pass a client inside a transaction; or, with a `pin`, the Db, to start in one statement (a
 * start that spawns children takes a transaction of its own either way). With a `pin`, null
 * means it no longer holds, and nothing was inserted.
 */
export async function insertWorkflow(on: Client, t: Transition, key: StartKey): Promise<Inserted>;
export async function insertWorkflow(on: Client | Db, t: Transition, key: StartKey & { pin: StartPin }): Promise<Inserted | null>;
export async function insertWorkflow(on: Client | Db, t: Transition, key: StartKey): Promise<Inserted | null> {
  if ('pool' in on && t.commands.some((c) => c.type === 'spawn')) return inEnv(on, t.instance.env, (c) => insertWorkflow(c, t, key));
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
  if (key.lease || key.announced) effects.notify = false;
  // the first journal row: the instance was created and began (row_version 1)
  const journal = key.initial === undefined ? null : journalParam(1, key.initial, { type: 'begin' }, t);
  const values = [JSON.stringify(row), JSON.stringify(effects), journal === null ? null : JSON.stringify(journal)] as const;
  // one statement (migration 0042): the row, its first attempt's rows and the journal row; with
  // the pin checked first, scoped to the env by itself (0046), and sent as the caller says (0052)
  const q = 'pool' in on ? on.pool : on;
  let started: { id: string; created: boolean; request_hash: string | null; record?: WorkflowRecord | null } | null;
  if (key.pin === undefined) {
    const res = await q.query({ name: 'flow_insert_started', text: 'SELECT id, created, request_hash FROM insert_started($1::jsonb, $2::jsonb, $3::jsonb)', values: [...values] });
    started = res.rows[0] ?? null;
  } else {
    const pinned = [...values, JSON.stringify(key.withRecord ? { ...key.pin, record: true } : key.pin)] as const;
    started = await (key.send && 'pool' in on ? key.send(pinned) : insertPinned(q, pinned));
  }
  if (started === null) return null;
  const inserted = { id: started.id, created: started.created, requestHash: started.request_hash, record: started.record ?? null };
  // a new instance has no children to cancel
  if (started.created) await writeFanOut(on as Client, t, {});
  return inserted;
}

export interface Inserted {
  id: string;
  created: boolean;
  requestHash: string | null;
  /** The instance's WorkflowRecord as the start left it, when `withRecord` asked for it. */
  record: WorkflowRecord | null;
}
