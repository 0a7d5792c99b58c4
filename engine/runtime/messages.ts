import { grants } from '../../contracts/scopes.ts';
import type { LogicVersion } from '../../contracts/index.ts';
import type { Instance, JsonValue } from '../core/instance.ts';
import type { Transition } from '../core/transition.ts';
import { apply, type TraceEvent } from '../core/journal.ts';
import { planDelivery, waitingOn } from '../core/messages.ts';
import { ScopeMissing } from '../errors.ts';
import { insertAudit } from '../store/audit.ts';
import { commitTransition } from '../store/commit-transition.ts';
import type { Db } from '../store/db.ts';
import { ConcurrentUpdate, NotFound, refusedForData } from '../store/errors.ts';
import { loadWorkflow } from '../store/load-workflow.ts';
import { countBuffered, type DeliveryAnswer, findDelivery, insertMessage, lockWorkflow, markConsumed, oldestBuffered, parkedWithBuffered, setAsideUnread } from '../store/messages.ts';
import type { Stored } from '../store/rows.ts';
import { asScheduler, type Client, inEnv } from '../store/tx.ts';
import { cancelTree } from './cancel-tree.ts';
import type { LogicCache } from './logic-cache.ts';
import { summary } from './mutate.ts';
import type { TransitionObserver } from './observer.ts';
import { ChangeUnstorable, checkStorable } from './storable.ts';

export interface Delivery {
  name: string;
  payload: JsonValue;
  /** The caller's Idempotency-Key: a repeat within the instance is answered with the first answer. */
  key: string;
  sender: { subject: string; scopes: readonly string[] };
}

/**
 * Messages to running instances. A delivery is one transaction under the instance's row lock: a
 * repeat of its key answers as the first did; otherwise the message is checked against the
 * version's waitFor steps and written in arrival order, and when the instance is parked on that
 * name its oldest buffered message (this one, unless older ones wait) is handed to the core and
 * the transition committed in the same transaction — state before effect, fenced by row_version,
 * as a decision is. A message that finds its step not yet reached stays buffered; the step takes
 * it when the instance parks there (`handOver`, called after such a commit, and the sweep that
 * catches what a crash or a race between a delivery and that commit left).
 */
export class Messages {
  constructor(
    private readonly db: Db,
    private readonly logics: LogicCache,
    private readonly opts: { maxBuffered: number; maxInputBytes: number; observer: TransitionObserver },
  ) {}

  async deliver(env: string, id: string, m: Delivery): Promise<DeliveryAnswer> {
    checkStorable('the message payload', m.payload, this.opts.maxInputBytes);
    const may = (inst: Instance) => {
      if (!grants(m.sender.scopes, 'flow:signal', inst.logicId)) throw new ScopeMissing(m.sender.subject, 'flow:signal', `workflow ${id} (${inst.logicId})`);
    };
    let committed: CommittedMessage | null = null;
    const answer = await inEnv(this.db, env, async (c): Promise<DeliveryAnswer> => {
      const done = await this.deliverIn(c, env, id, m, may);
      committed = done.committed;
      return done.answer;
    }).catch((err: unknown) => {
      throw refusedForData(err) ? new ChangeUnstorable(err) : err;
    });
    this.told(committed);
    return answer;
  }

  /**
   * One delivery in the caller's env-scoped transaction (the messages route's own, or an event's:
   * runtime/ingest-event.ts). `authorise` is asked with the instance read under its lock and
   * throws when the sender may not reach it. Throws the core's refusals before writing anything,
   * so a caller delivering to several instances may record a refusal and go on. The caller tells
   * `told(committed)` once its transaction has committed.
   */
  async deliverIn(
    c: Client,
    env: string,
    id: string,
    m: Omit<Delivery, 'sender'> & { sender: { subject: string } },
    authorise: (inst: Instance) => void,
  ): Promise<{ answer: DeliveryAnswer; committed: CommittedMessage | null }> {
    const stored = (await lockWorkflow(c, id)) ? await loadWorkflow(c, id) : null;
    if (stored === null) throw new NotFound(`workflow ${id}`);
    const inst = stored.instance;
    authorise(inst);
    const first = await findDelivery(c, id, m.key);
    if (first !== null) return { answer: first, committed: null };
    const logic = await this.logics.get(env, inst.logicHash, c);
    const buffer = { olderOfName: (await oldestBuffered(c, id, m.name)) !== null, count: await countBuffered(c, id), max: this.opts.maxBuffered };
    const takesNow = planDelivery(logic, inst, m, buffer) === 'deliver';
    const answer: DeliveryAnswer = takesNow
      ? { status: 200, body: { workflowId: id, message: m.name, status: 'delivered' } }
      : { status: 202, body: { workflowId: id, message: m.name, status: 'buffered' } };
    const row = { env, workflowId: id, key: m.key, name: m.name, payload: m.payload, answer };
    const committed = takesNow ? await this.#commitMessage(c, logic, stored, m.name, m.payload, m.sender.subject) : null;
    await insertMessage(c, { ...row, state: takesNow ? 'consumed' : 'buffered' });
    return { answer, committed };
  }

  /**
   * Hands the instance its oldest buffered message of the name it is parked on. False when it is
   * not parked on a waitFor step or no such message waits.
   */
  async handOver(env: string, id: string): Promise<boolean> {
    const committed = await inEnv(this.db, env, async (c): Promise<CommittedMessage | null> => {
      const stored = (await lockWorkflow(c, id)) ? await loadWorkflow(c, id) : null;
      if (stored === null) return null;
      const logic = await this.logics.get(env, stored.instance.logicHash, c);
      const name = waitingOn(logic, stored.instance);
      if (name === null) return null;
      const buffered = await oldestBuffered(c, id, name);
      if (buffered === null) return null;
      const done = await this.#commitMessage(c, logic, stored, name, buffered.payload, null);
      await markConsumed(c, buffered.id);
      return done;
    });
    this.told(committed);
    return committed !== null;
  }

  /**
   * The sweep (a ticker of the worker pool): hands over what a crash or a race left buffered, and
   * sets aside (`unread`) what ended instances never took, so the sweep's own scan stays small.
   */
  async fire(): Promise<{ fired: number; nextDueMs: number | null }> {
    const due = await asScheduler(this.db, async (c) => {
      await setAsideUnread(c);
      return parkedWithBuffered(c, 100);
    });
    let fired = 0;
    for (const { env, workflowId } of due) {
      try {
        if (await this.handOver(env, workflowId)) fired++;
      } catch (err) {
        // another writer moved it meanwhile (a verb, a timer): the next sweep looks again
        if (!(err instanceof ConcurrentUpdate)) this.opts.observer.onError?.(workflowId, err);
      }
    }
    return { fired, nextDueMs: null };
  }

  /** Tells the observer of a committed hand-over (after the commit, as the worker loop does). */
  told(committed: CommittedMessage | null): void {
    if (committed !== null) this.opts.observer.onTransition?.(committed.from, committed.t, true);
  }

  async #commitMessage(c: Client, logic: LogicVersion, stored: Stored, name: string, payload: JsonValue, sender: string | null): Promise<CommittedMessage> {
    const event: TraceEvent = { type: 'message', args: { name, payload } };
    const t = await apply(logic, stored.instance, event);
    if (t === null) throw new Error(`workflow ${stored.instance.id}: message ${name} decided nothing`);
    if (!(await commitTransition(c, stored, t, { keepLease: null, cancelChildren: cancelTree(this.logics), event }))) throw new ConcurrentUpdate(stored.instance.id);
    if (sender !== null) {
      const env = stored.instance.env;
      await insertAudit(c, { workflowId: stored.instance.id, env, verb: 'message', actor: sender, reason: null, args: { name }, before: summary(stored.instance), after: summary(t.instance) });
    }
    return { from: stored.instance, t };
  }
}

/** A delivery that moved its instance: told to the observer once committed. */
export interface CommittedMessage {
  from: Instance;
  t: Transition;
}
