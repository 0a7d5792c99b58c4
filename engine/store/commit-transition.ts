import { isAllowedTransition, TERMINAL_STATES } from '../../contracts/index.ts';
import { signalParent, spawnChildren } from './children.ts';
import type { AttributeWrite } from '../core/attributes.ts';
import type { Command, Ctx, Instance } from '../core/instance.ts';
import type { TraceEvent } from '../core/journal.ts';
import type { Transition } from '../core/transition.ts';
import type { Db } from './db.ts';
import type { CommitReceipt } from './commit-batch.ts';
import { TransitionRefused } from './errors.ts';
import { journalParam } from './journal.ts';
import { needsParam, type PermitNeed } from './permits.ts';
import { outputsParam, type Stored, storedCtx } from './rows.ts';
import { type Client, inEnv, type Queryable } from './tx.ts';

/**
 * Ends every open descendant of `parent` in the caller's transaction. The core decides what
 * cancelling each one means (closing its open attempt, preparing its compensations), so the
 * runtime supplies it (runtime/cancel-tree.ts); the store only locks and writes.
 */
export type CancelChildren = (c: Client, parent: Instance, compensate: boolean) => Promise<void>;

export interface CommitOptions {
  /** Keep (and extend) the lease: this worker goes straight on with the next prepared attempt. */
  keepLease: { token: string; ttlMs: number } | null;
  /**
   * The input the core decided `t` from: journalled with it (migration 0008), so the instance can
   * be exported as a trace and replayed. Every engine path passes it; only tests that write a
   * hand-made transition leave it out, and such a transition is not journalled.
   */
  event?: TraceEvent;
  /** Needed by a transition that cancels its children (a cancel verb, a fail_fast fan-in). */
  cancelChildren?: CancelChildren;
  /** The committing worker's lease token, kept as the commit's receipt (see commitLanded). */
  by?: string;
  /**
   * Sends a commit that is one statement on the pool (not a fan-out's transaction) and answers
   * its receipt: the worker pool's batcher (runtime/commit-batcher.ts) puts it in a batch.
   * (Default: `commitOne` on the pool, on its own)
   */
  send?: (param: string, takesPermits: boolean) => Promise<CommitReceipt>;
  /**
   * With `keepLease`: the permits the instance's next attempt needs, taken in the same statement
   * right after the commit (migration 0037); `send`'s receipt says whether they were. A commit
   * that is a transaction of its own (a fan-out) does not carry them: the worker then takes them
   * before that attempt, as it takes a claimed instance's.
   */
  permits?: readonly PermitNeed[];
  /**
   * With `keepLease`: the attempt this commit ends held permits (migration 0039). A permit is held
   * by the lease, so the commit yields those the next attempt does not need; where that attempt
   * needs none, it carries an empty `permits` for that. (Default: false)
   */
  heldPermits?: boolean;
}

/**
 * Writes a transition with `commit_transition()` (through `commit_journaled()`, which adds its
 * journal row; the live bodies are in engine/store/schema.sql): the workflow row guarded by
 * row_version and state — the fence that shuts out a worker whose lease was taken, and a verb
 * that lost a race — with the step_runs, outbox and timer rows joined to it. Returns false when
 * the guard matched no row: the caller lost and must re-read; nothing was written.
 *
 * Pass a client inside a transaction; pass the Db to commit in one statement (on its own, or in
 * a batch with other instances' commits through `opts.send`). A transition that spawns or
 * cancels children, or ends a child, takes a transaction of its own either way.
 */
export async function commitTransition(on: Client | Db, from: Stored, t: Transition, opts: CommitOptions): Promise<boolean> {
  const to = t.instance;
  if (!isAllowedTransition(from.instance.state, t.cause, to.state)) {
    throw new TransitionRefused(to.id, from.instance.state, t.cause, to.state);
  }
  const takesPermits = opts.keepLease !== null && ((opts.permits?.length ?? 0) > 0 || opts.heldPermits === true);
  const param = {
    ...effectsParam(t, from.instance.ctx.outputs),
    env: to.env,
    id: to.id,
    rowVersion: from.rowVersion,
    fromState: from.instance.state,
    state: to.state,
    output: to.output,
    currentStep: to.currentStep,
    error: to.error,
    generation: to.generation,
    ctx: storedCtx(to.ctx),
    runAfterMs: t.runAfterMs,
    leaseToken: opts.keepLease?.token ?? null,
    leaseMs: opts.keepLease?.ttlMs ?? 0,
    by: opts.by ?? null,
    ...(takesPermits ? { permits: needsParam(opts.permits ?? []) } : {}),
    notify: (to.state === 'pending' || to.state === 'compensating') && opts.keepLease === null,
    ...(opts.event === undefined ? {} : { journal: journalParam(from.rowVersion + 1, from.instance, opts.event, t) }),
  };
  const fanning = t.commands.some((c) => c.type === 'spawn' || c.type === 'cancelChildren');
  const childEnded = to.parentId !== null && TERMINAL_STATES.has(to.state) && !TERMINAL_STATES.has(from.instance.state);
  if ('pool' in on && (fanning || childEnded)) return inEnv(on, to.env, (c) => commitTransition(c, from, t, opts));

  const json = JSON.stringify(param);
  const n = 'pool' in on ? (await (opts.send ?? (async (p) => ({ n: await commitOne(on.pool, p), permits: null })))(json, takesPermits)).n : await commitOne(on, json);
  if (n !== 1) return false;
  // a transaction of its own carries no permits: what the lease held is yielded, and the worker
  // takes the next attempt's before it (migration 0039)
  if (!('pool' in on) && takesPermits) await on.query('SELECT yield_permits($1, $2)', [to.id, opts.keepLease!.token]);
  await writeFanOut(on as Client, t, opts);
  if (childEnded) await signalParent(on as Client, to, to.parentSeq!);
  return true;
}

/** One transition's commit_journaled() parameter (JSON) in one statement: its row count, 1 or 0. */
export async function commitOne(q: Queryable, param: string): Promise<number> {
  // named: each connection parses and plans it once (every step sends it)
  const res = await q.query<{ n: number }>({ name: 'flow_commit', text: 'SELECT commit_journaled($1::jsonb) AS n', values: [param] });
  return res.rows[0]!.n;
}

/**
 * Did this worker's commit of the transition from `rowVersion` land? Asked when a retried commit
 * found the guard moved after a lost connection: true when the row holds the receipt that commit
 * wrote (migration 0006) — the worker's lease token at version `rowVersion + 1` — false when
 * someone else moved the row (a fence, a verb). False, too, once a later commit has replaced the
 * receipt: the instance has moved on without this worker, which is then right to let it go.
 */
export async function commitLanded(c: Client, args: { id: string; token: string; rowVersion: number }): Promise<boolean> {
  const res = await c.query('SELECT 1 FROM workflows WHERE id = $1 AND commit_token = $2 AND commit_version = $3', [
    args.id,
    args.token,
    args.rowVersion + 1,
  ]);
  return res.rowCount === 1;
}

/** Fan-out rides in the same transaction as the transition that asked for it (the caller's). */
export async function writeFanOut(c: Client, t: Transition, opts: Pick<CommitOptions, 'cancelChildren'>): Promise<void> {
  for (const cmd of t.commands) {
    if (cmd.type === 'spawn') await spawnChildren(c, t.instance, cmd);
    if (cmd.type === 'cancelChildren') {
      if (opts.cancelChildren === undefined) throw new Error(`workflow ${t.instance.id}: cancelling its children needs CommitOptions.cancelChildren`);
      await opts.cancelChildren(c, t.instance, cmd.compensate === true);
    }
  }
}

/**
 * The rows besides the workflow row that a transition writes, as `write_effects()` reads them:
 * among them only the outputs it changed (migration 0011), so a commit's size does not grow with
 * the steps before it. `before`: the outputs the store holds for the instance now.
 */
export function effectsParam(t: Transition, before: Ctx['outputs'], changed: readonly string[] = t.outputsChanged) {
  return {
    ...outputsParam(before, t.instance.ctx, changed),
    state: t.instance.state,
    attempts: t.attempts,
    outbox: t.commands.filter((c) => c.type === 'outbox'),
    timers: t.commands.flatMap((c): object[] => (c.type === 'timer' ? [c] : c.type === 'sla' ? [slaTimer(c)] : [])),
    notify: t.instance.state === 'pending' || t.instance.state === 'compensating',
    // only a transition that set attributes carries the key: write_effects() tests for it (migration 0031)
    ...(t.attributes === undefined ? {} : { attributes: attributesParam(t.attributes) }),
  };
}

/** An SLA timer as write_effects() writes it: purpose 'sla', its payload `{ step, within }`. */
function slaTimer(c: Extract<Command, { type: 'sla' }>) {
  return { purpose: 'sla', delayMs: c.delayMs, at: null, seq: null, sla: { step: c.step, within: c.within } };
}

/** Each attribute in the column of its type; `type: null` unsets it. */
function attributesParam(attributes: Record<string, AttributeWrite>) {
  return Object.entries(attributes).map(([name, a]) =>
    a === null
      ? { name, type: null }
      : { name, type: a.type, text: a.type === 'string' ? a.value : null, num: a.type === 'number' ? a.value : null, time: a.type === 'time' ? a.value : null },
  );
}
