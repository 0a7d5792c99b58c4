import { setTimeout as sleep } from 'node:timers/promises';
import { type LogicVersion, TERMINAL_STATES } from '../../contracts/index.ts';
import { beginClaimed, isUnstarted, onOutcome, onProgress } from '../core/flow.ts';
import type { Instance } from '../core/instance.ts';
import type { Executors } from '../executors/index.ts';
import { claimWorkflows, heartbeat } from '../store/claim-workflows.ts';
import { commitTransition } from '../store/commit-transition.ts';
import type { Db } from '../store/db.ts';
import type { Stored } from '../store/rows.ts';
import { asScheduler } from '../store/tx.ts';
import { executeAttempt } from './execute-attempt.ts';
import type { LogicCache } from './logic-cache.ts';
import type { ResumeTokens } from './resume-tokens.ts';
import type { Transition } from '../core/transition.ts';
import type { TransitionObserver } from './observer.ts';
import { fireDueTimers } from './timers.ts';

/** The shortest time between two timer polls that found nothing, however often the pool is woken. */
const TIMER_POLL_GAP_MS = 10;

export interface WorkerOptions {
  /** Instances driven at once by this process: the bound of the pool. (Default: 16) */
  concurrency?: number;
  /** Lease length; a worker silent for this long loses its instances. (Default: 30000) */
  leaseMs?: number;
  /** Longest sleep between claims when nothing wakes the pool earlier. (Default: 250) */
  pollMs?: number;
}

/**
 * A bounded pool of step runners. It claims only as many instances as it has free slots
 * (backpressure: work waits in Postgres, not in memory), drives each through its prepared
 * attempts, and keeps its lease alive with heartbeats while an executor runs.
 */
export class WorkerPool {
  readonly concurrency: number;
  readonly leaseMs: number;
  readonly pollMs: number;
  #inflight = 0;
  #running = false;
  #stopping = false;
  #loop: Promise<void> | null = null;
  #timerLoop: Promise<void> | null = null;
  #wake: (() => void) | null = null;
  #wakeTimers: (() => void) | null = null;
  #unlisten: (() => Promise<void>) | null = null;
  #companions: { start(): Promise<void>; stop(): Promise<void> }[] = [];

  constructor(
    private readonly db: Db,
    private readonly logics: LogicCache,
    private readonly executors: Executors,
    private readonly tokens: ResumeTokens,
    private readonly observer: TransitionObserver,
    opts: WorkerOptions = {},
  ) {
    this.concurrency = opts.concurrency ?? 16;
    this.leaseMs = opts.leaseMs ?? 30_000;
    this.pollMs = opts.pollMs ?? 250;
  }

  /** Instances this process is driving right now (a gauge for metrics and shutdown). */
  get inflight(): number {
    return this.#inflight;
  }

  async start(): Promise<void> {
    if (this.#running) return;
    this.#running = true;
    this.#stopping = false;
    this.#unlisten = await this.db.listen('flow_work', () => this.wake()).catch(() => null);
    this.#loop = this.#run();
    this.#timerLoop = this.#runTimers();
    for (const loop of this.#companions) await loop.start();
  }

  /** A loop that starts and stops with the pool (the outbox relay). */
  attach(loop: { start(): Promise<void>; stop(): Promise<void> }): void {
    this.#companions.push(loop);
  }

  /** Stops claiming, lets in-flight instances finish their current attempt, and hands them back. */
  async stop(): Promise<void> {
    this.#running = false;
    this.#stopping = true;
    this.wake();
    await this.#loop;
    await this.#timerLoop;
    while (this.#inflight > 0) await sleep(10);
    await this.#unlisten?.();
    await Promise.all(this.#companions.map((loop) => loop.stop()));
  }

  wake(): void {
    this.#wake?.();
  }

  /** Fires due timers and drives work until nothing is due, claimable or in flight. */
  async drain(): Promise<void> {
    for (;;) {
      // sampled before looking: an instance that finishes while we look may leave new work
      const idle = this.#inflight === 0;
      const done = (await fireDueTimers(this.db, this.logics)) + (await this.#claim());
      if (done === 0 && idle) return;
      if (done === 0) await this.#nap(5);
    }
  }

  async #run(): Promise<void> {
    while (this.#running) {
      let done = 0;
      try {
        done = await this.#claim();
      } catch (err) {
        // the database is away (restart, network): keep polling until it is back
        this.observer.onError?.(null, err);
      }
      if (done === 0 || this.#inflight >= this.concurrency) await this.#nap(this.pollMs);
    }
  }

  /**
   * Fires due timers beside the claim loop, not in turn with it: a burst of due timers is fired
   * batch after batch without waiting for free slots, and the instances it wakes are claimed
   * meanwhile instead of once per batch.
   */
  async #runTimers(): Promise<void> {
    while (this.#running) {
      const began = Date.now();
      let fired = 0;
      try {
        fired = await fireDueTimers(this.db, this.logics);
      } catch (err) {
        this.observer.onError?.(null, err);
      }
      if (fired > 0) continue;
      await this.#nap(this.pollMs, 'timers');
      // woken early (new work, a slot freed): poll again, but not more often than every
      // TIMER_POLL_GAP_MS — wake-ups come by the thousand per second under load
      const wait = began + TIMER_POLL_GAP_MS - Date.now();
      if (wait > 0 && this.#running) await sleep(wait);
    }
  }

  async #claim(): Promise<number> {
    const free = this.concurrency - this.#inflight;
    if (free <= 0) return 0;
    const claimed = await asScheduler(this.db, (c) => claimWorkflows(c, { limit: free, leaseMs: this.leaseMs }));
    for (const stored of claimed) {
      this.#inflight++;
      void this.#drive(stored)
        .catch((err) => this.observer.onError?.(stored.instance.id, err))
        .finally(() => {
          this.#inflight--;
          this.wake();
        });
    }
    return claimed.length;
  }

  #nap(ms: number, loop: 'claims' | 'timers' = 'claims'): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      const self = this;
      function done() {
        clearTimeout(timer);
        if (loop === 'claims') self.#wake = null;
        else self.#wakeTimers = null;
        resolve();
      }
      if (loop === 'claims') this.#wake = done;
      else this.#wakeTimers = done;
    });
  }

  /** Runs prepared attempts of one instance for as long as it holds the lease and has one. */
  async #drive(start: Stored): Promise<void> {
    let stored = start;
    const token = stored.leaseToken!;
    for (;;) {
      const { instance } = stored;
      const logic = await this.logics.get(instance.env, instance.logicHash);
      const t = isUnstarted(instance) ? await beginClaimed(logic, instance) : await this.#step(logic, instance, token);
      const keep = !this.#stopping && t.runAfterMs === null && (t.instance.state === 'processing' || t.instance.state === 'compensating');
      // handing over: the next attempt is prepared, any worker may claim it
      if (!keep && t.instance.state === 'processing') t.instance.state = 'pending';
      const committed = await this.#commit(stored, t, keep ? { token, ttlMs: this.leaseMs } : null);
      this.observer.onTransition?.(stored.instance, t, committed);
      // a child that ended left its parent a due signal: fire it now rather than at the next poll
      if (committed && t.instance.parentId !== null && TERMINAL_STATES.has(t.instance.state)) this.#wakeTimers?.();
      if (!committed || !keep) return;
      stored = { instance: t.instance, rowVersion: stored.rowVersion + 1, leaseToken: token };
    }
  }

  /** Executes the prepared attempt and lets the core decide what its result means. */
  async #step(logic: LogicVersion, instance: Instance, token: string): Promise<Transition> {
    const result = await this.#withHeartbeat(instance.id, token, () => executeAttempt(logic, instance, this.executors, this.tokens));
    return result.status === 'progress' ? onProgress(logic, instance, result.record) : onOutcome(logic, instance, result);
  }

  async #commit(from: Stored, t: Transition, keepLease: { token: string; ttlMs: number } | null): Promise<boolean> {
    // A lost connection may or may not have committed; retrying is safe because the row_version
    // guard turns a second application into a no-op (it then reports false: fenced).
    for (let attempt = 1; ; attempt++) {
      try {
        // one statement, one round trip: commit_transition() scopes itself to the instance's env
        return await commitTransition(this.db, from, t, { keepLease });
      } catch (err) {
        if ((err as { code?: string }).code === 'FLOW_TRANSITION_REFUSED' || attempt >= 20) throw err;
        await sleep(Math.min(2000, 50 * 2 ** attempt));
      }
    }
  }

  async #withHeartbeat<T>(id: string, token: string, fn: () => Promise<T>): Promise<T> {
    const every = Math.max(50, Math.floor(this.leaseMs / 3));
    const timer = setInterval(() => {
      void asScheduler(this.db, (c) => heartbeat(c, { id, token, leaseMs: this.leaseMs })).catch(() => {});
    }, every);
    try {
      return await fn();
    } finally {
      clearInterval(timer);
    }
  }
}
