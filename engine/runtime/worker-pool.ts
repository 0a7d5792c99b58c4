import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Context } from '@opentelemetry/api';
import { setTimeout as sleep } from 'node:timers/promises';
import { type LogicVersion, TERMINAL_STATES } from '../../contracts/index.ts';
import { apply, claimedWork, type TraceEvent } from '../core/journal.ts';
import type { Instance } from '../core/instance.ts';
import type { Executors } from '../executors/index.ts';
import { claimWorkflows, type EnvWeights, letLeaseLapse, releaseWakes } from '../store/claim-workflows.ts';
import { attemptTimeoutMs } from '../core/flow.ts';
import type { Circuits } from './circuits.ts';
import { commitLanded, commitTransition } from '../store/commit-transition.ts';
import { acquireParam } from '../store/commit-batch.ts';
import type { Db } from '../store/db.ts';
import type { Stored } from '../store/rows.ts';
import { asScheduler } from '../store/tx.ts';
import { DEFAULT_TIMEOUT_CAPS, executeAttempt, isOneCall, startAhead, type TimeoutCaps } from './execute-attempt.ts';
import type { LogicCache } from './logic-cache.ts';
import type { ResumeTokens } from './resume-tokens.ts';
import type { Transition } from '../core/transition.ts';
import type { TransitionObserver } from './observer.ts';
import { type FiredTimers, fireDueTimers } from '../store/timers.ts';
import { applyWakes } from './wakes.ts';
import { Alarm } from './alarm.ts';
import { cancelTree } from './cancel-tree.ts';
import { Heartbeats, type LeaseKeeper } from './lease-keeper.ts';
import { CommitBatcher } from './commit-batcher.ts';
import { Slots } from './slots.ts';
import { instanceContext, traceAttempt, traceQueueWait, traceWakes } from './trace-spans.ts';
import { refusedForData } from '../store/errors.ts';
import { DEFAULT_MAX_INPUT_BYTES, DEFAULT_RETRY_AFTER_MAX_MS, type ResultLimits, storableResult, unstorableCommit } from './storable.ts';
import type { Allotment } from './allowances.ts';
import type { Permits } from './permits.ts';
import type { Acquired, PermitNeed } from '../store/permits.ts';

/** Whether the worker goes straight on with the instance after committing `t`, keeping its lease. */
function keepsGoing(t: Transition, goOn: boolean): boolean {
  return goOn && t.runAfterMs === null && (t.instance.state === 'processing' || t.instance.state === 'compensating');
}

/** The shortest time between two timer polls that found nothing, however often the pool is woken. */
const TIMER_POLL_GAP_MS = 10;
/** Timers fired per statement (about 30 µs each): a burst of 10,000 due at once takes a few. */
const TIMER_BATCH = 2000;
/** Firing statements side by side during a burst, SKIP LOCKED keeping them apart: two cores. */
const TIMER_FIRERS = 2;

/** A lease a start may give its new instance, from the pool of the engine starting it (WorkerPool.reserve). */
export interface StartLease {
  token: string;
  leaseMs: number;
  /** Drives the instance, inserted leased with `token`: it costs no claim. */
  adopt(stored: Stored): void;
  /** The start leased nothing (not due now, a repeat, or it failed): the room goes back. */
  release(): void;
}

/** Executors of a pool not told otherwise (`WorkerOptions.concurrency`). */
export const DEFAULT_CONCURRENCY = 16;

export interface WorkerOptions {
  /**
   * Attempts executed at once by this process: the bound of the pool. The pool holds up to
   * twice as many instances: the others are applying a wake-up, committing, or next in line for
   * an executor. (Default: 16)
   */
  concurrency?: number;
  /** Lease length; a worker silent for this long loses its instances. (Default: 30000) */
  leaseMs?: number;
  /** Longest sleep between claims when nothing wakes the pool earlier. (Default: 250) */
  pollMs?: number;
  /** Caps on every attempt's timeout (execute-attempt.ts). (Default: DEFAULT_TIMEOUT_CAPS) */
  timeoutCaps?: TimeoutCaps;
  /** How many instances each env gets per turn of a claim (FLOW_ENV_WEIGHTS). (Default: 1 each) */
  envWeights?: EnvWeights;
  /** The handler circuits step attempts pass through (circuits.ts). (Default: none) */
  circuits?: Circuits;
}

/**
 * A bounded pool of step runners. It runs at most `concurrency` attempts at once and holds at
 * most twice as many instances (backpressure: the rest of the work waits in Postgres, not in
 * memory), drives each through its prepared attempts, and keeps every lease it holds alive with
 * heartbeats.
 *
 * The instances held beyond those executing are a reserve, claimed in one batch once it has run
 * out and an executor is free: an executor that finishes takes the next instance in line at
 * once instead of waiting for a claim's round trip, and a claim takes more than `concurrency`
 * instances, not the one or two that happened to finish while the last claim was out. (With
 * every executor busy, nothing is claimed: a pool of one never holds a second instance while its
 * one executor is busy.) A woken instance's wake-up transition needs no executor:
 * it is applied and committed as soon as the instance is claimed, together with the others
 * claimed with it (one batched commit), and the instance then waits in line for its next step.
 * A timer poll leases by the same rule the instances it wakes, in the statement that fires
 * their timers (migration 0016): those need no claim.
 * The price of the reserve: at the end of a backlog, up to `concurrency` instances may wait here
 * for an executor while another process has one free.
 */
/**
 * What the commit that kept the lease prepared for the next attempt: the permits it needs and what
 * the commit answered for them (migration 0037), or the room a loan gave it instead (0053).
 */
interface Ahead {
  needs: PermitNeed[];
  taken: Acquired | null;
  allotted: Allotment | null;
}

export class WorkerPool {
  readonly concurrency: number;
  readonly leaseMs: number;
  readonly pollMs: number;
  readonly timeoutCaps: TimeoutCaps;
  #inflight = 0;
  /** Aborted by stop(): module runs in flight are abandoned, their instances let go at once. */
  #halt = new AbortController();
  #running = false;
  #stopping = false;
  #loop: Promise<void> | null = null;
  #timerLoop: Promise<void> | null = null;
  /**
   * Whether the last claim filled every free slot, so more work may be waiting for a slot that
   * frees. When it came back short, an instance that finishes does not claim again: new work
   * announces itself (NOTIFY flow_work, fired timers, a due retry, this pool's own spawns and
   * hand-overs), and the poll finds the rest (expired leases). Claims follow work, not finishes.
   */
  #moreMayWait = true;
  /** While a burst of due timers is being fired, claims wait (at most a poll interval): see #fireTimers. */
  #holdClaimsUntil = 0;
  /** Timer polls out now, and whether the last one passed over a due timer whose instance was held. */
  #firing = 0;
  #passedOver = false;
  /**
   * Leases asked for by the claim and firing statements out now: the room counts them as held, so
   * a claim and a timer poll out together never ask for more than the pool has room for.
   */
  #asking = 0;
  /** Leases starts in this process reserved and have not yet adopted or given back (reserve). */
  #starting = 0;
  /** Instances held per env, executing or waiting for an executor. */
  readonly #heldByEnv = new Map<string, number>();
  /** Envs that asked for room while this pool held none of their instances: see wake. */
  readonly #wanted = new Set<string>();
  /** Envs with a start leased over the pool's bound in progress: one at a time (reserve). */
  readonly #keptStarts = new Set<string>();
  /** The claim out now for envs that hold nothing here (#claimKept); a timer poll waits for it. */
  #keptClaim: Promise<unknown> | null = null;
  /** A claim found no room because a timer poll out had asked for it: look again when the poll returns. */
  #claimDeferred = false;
  /** Rung for new work (the claim loop) and for timers that may be due sooner (the timer loop). */
  readonly #claims = new Alarm();
  readonly #timers = new Alarm();
  readonly #claimSleep = this.#claims.waiter();
  readonly #timerSleep = this.#timers.waiter();
  readonly #cancelTree;
  readonly #heartbeats: Heartbeats;
  /** The workers' one-statement commits, many instances' to a statement (one fsync). */
  readonly #batcher: CommitBatcher;
  /** At most `concurrency` attempts executing; the instances held beyond them wait here in claim order. */
  readonly #executors: Slots;
  #unlisten: (() => Promise<void>)[] = [];
  readonly #envWeights: EnvWeights | undefined;
  readonly #circuits: Circuits | undefined;
  #companions: { start(): Promise<void>; stop(): Promise<void> }[] = [];
  /** Other due-time work the timer loop fires (schedules), with when it is next worth a look. */
  #tickers: { fire(): Promise<{ fired: number; nextDueMs: number | null }>; lookAt: number }[] = [];

  constructor(
    private readonly db: Db,
    private readonly logics: LogicCache,
    private readonly executors: Executors,
    private readonly tokens: ResumeTokens,
    private readonly observer: TransitionObserver,
    opts: WorkerOptions = {},
    /** What an executor's result must fit to be recorded (storable.ts). */
    private readonly limits: ResultLimits = { maxBytes: DEFAULT_MAX_INPUT_BYTES, maxRetryAfterMs: DEFAULT_RETRY_AFTER_MAX_MS },
    /** The permits limited calls and keys need (permits.ts); none: nothing is limited. */
    private readonly permits: Permits | null = null,
  ) {
    this.concurrency = opts.concurrency ?? DEFAULT_CONCURRENCY;
    this.leaseMs = opts.leaseMs ?? 30_000;
    this.pollMs = opts.pollMs ?? 250;
    this.timeoutCaps = opts.timeoutCaps ?? DEFAULT_TIMEOUT_CAPS;
    this.#envWeights = opts.envWeights;
    this.#circuits = opts.circuits?.enabled === true ? opts.circuits : undefined;
    this.#cancelTree = cancelTree(logics);
    this.#heartbeats = new Heartbeats(db, this.leaseMs, observer);
    this.#batcher = new CommitBatcher(db.pool);
    this.#executors = new Slots(this.concurrency);
  }

  /** Instances this process holds right now, executing or not (a gauge for metrics and shutdown). */
  get inflight(): number {
    return this.#inflight;
  }

  async start(): Promise<void> {
    if (this.#running) return;
    this.#running = true;
    this.#stopping = false;
    this.#halt = new AbortController();
    const listen = (channel: string, onNotify: (payload: string) => void) =>
      this.db.listen(channel, onNotify).then((unlisten) => this.#unlisten.push(unlisten), () => {});
    await listen('flow_work', () => this.wake());
    // a lease of this pool's taken by a verb, a parent's cancel or a claim: stop before running more
    await listen('flow_lease_taken', (notice) => this.#heartbeats.taken(notice));
    // before the loops: its reads and LISTENs must not interleave with theirs (PGlite has one connection)
    await this.permits?.start();
    this.#loop = this.#run();
    this.#timerLoop = this.#runTimers();
    for (const loop of this.#companions) await loop.start();
  }

  /** A loop that starts and stops with the pool (the outbox relay). */
  attach(loop: { start(): Promise<void>; stop(): Promise<void> }): void {
    this.#companions.push(loop);
  }

  /**
   * Due-time work besides instance timers (the schedules): the timer loop fires it when it falls
   * due by its own reckoning, and at least every poll interval (another process may have added
   * some); `drain()` fires it every round.
   */
  attachTicker(ticker: { fire(): Promise<{ fired: number; nextDueMs: number | null }> }): void {
    this.#tickers.push({ fire: () => ticker.fire(), lookAt: 0 });
  }

  /** Fires the tickers due a look (all of them when `all`); the soonest next due time among them. */
  async #fireTickers(all: boolean): Promise<{ fired: number; nextDueMs: number | null }> {
    let fired = 0;
    let nextDueMs: number | null = null;
    for (const t of this.#tickers) {
      const now = Date.now();
      if (!all && now < t.lookAt) {
        nextDueMs = Math.min(nextDueMs ?? Infinity, t.lookAt - now);
        continue;
      }
      const r = await t.fire();
      fired += r.fired;
      const wait = Math.min(this.pollMs, Math.max(0, r.nextDueMs ?? this.pollMs));
      t.lookAt = r.fired > 0 ? now : now + wait;
      nextDueMs = Math.min(nextDueMs ?? Infinity, r.fired > 0 ? 0 : wait);
    }
    return { fired, nextDueMs };
  }

  /**
   * Stops claiming, lets in-flight instances finish their current attempt, and hands them back.
   * A module run in flight is abandoned instead (its worker terminated): it has no effects, its
   * instance's lease is let lapse at once, and whoever claims it next runs the module again. So a
   * module that spins does not hold the stop up.
   */
  async stop(): Promise<void> {
    this.#running = false;
    this.#stopping = true;
    this.#halt.abort();
    this.wake();
    this.#timers.ring();
    await this.#loop;
    await this.#timerLoop;
    while (this.#inflight > 0) await sleep(10);
    await Promise.all(this.#unlisten.splice(0).map((unlisten) => unlisten()));
    await Promise.all(this.#companions.map((loop) => loop.stop()));
    await this.permits?.stop();
  }

  /**
   * Rings the claim loop for new work. With `env`, the work is that env's (a start, a verb, a
   * message): when this pool holds none of its instances, the next claim takes one for it
   * whether or not the pool has room, so a backlog in one env never keeps another's start
   * waiting for a whole workflow to end (room kept for every env, migration 0048).
   */
  wake(env?: string): void {
    if (env !== undefined && !this.#heldByEnv.has(env)) this.#wanted.add(env);
    this.#claims.ring();
  }

  /**
   * A lease for an instance this process is starting in `env`, when the pool runs and an executor
   * is free for it: the start inserts the instance leased (migration 0045) and hands it to
   * `adopt`, so its first attempt waits for no claim. A full pool still gives one to a start in an
   * env it holds nothing of (room kept for every env, as `wake` keeps it for a claim): the
   * executors run such an env at once. Null otherwise: a claim takes it, as before.
   * Exactly one of `adopt` and `release` must follow.
   */
  reserve(env: string): StartLease | null {
    if (!this.#running || this.#stopping) return null;
    // an executor free for it now, whatever claims out now may bring (they fill the reserve)
    const free = this.#inflight + this.#starting < this.concurrency;
    if (!free && (this.#heldByEnv.has(env) || this.#keptStarts.has(env))) return null;
    if (!free) this.#keptStarts.add(env);
    this.#starting++;
    let open = true;
    const settle = () => {
      if (!open) return false;
      open = false;
      this.#starting--;
      if (!free) this.#keptStarts.delete(env);
      return true;
    };
    return {
      token: randomUUID(),
      leaseMs: this.leaseMs,
      adopt: (stored) => {
        if (settle()) this.#take([stored]);
      },
      release: () => {
        // the reserved room goes unused: a claim may want it
        if (settle()) this.wake();
      },
    };
  }

  /** Fires due timers and drives work until nothing is due, claimable or in flight. */
  async drain(): Promise<void> {
    const claims = this.#claims.waiter();
    for (;;) {
      // sampled before looking: an instance that finishes while we look may leave new work
      const idle = this.#inflight === 0;
      const done = (await this.#fireTimers()).fired + (await this.#fireTickers(true)).fired + (await this.#claim());
      if (done === 0 && idle) return;
      if (done === 0) await claims.sleep(5);
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
      if (done === 0 || this.#inflight >= this.concurrency) await this.#claimSleep.sleep(this.pollMs);
    }
  }

  /**
   * Fires due timers beside the claim loop, not in turn with it. Firing marks instances woken
   * (one statement per batch) and leases those the pool has room for; the claim loop takes the
   * rest. Between polls it sleeps until the next timer is due by the database's reckoning, at
   * most the poll interval (a timer set meanwhile by another process may be due sooner).
   */
  async #runTimers(): Promise<void> {
    while (this.#running) {
      const began = Date.now();
      let next: Pick<FiredTimers, 'fired' | 'nextDueMs'> = { fired: 0, nextDueMs: null };
      try {
        next = await this.#fireTimers();
      } catch (err) {
        this.observer.onError?.(null, err);
      }
      try {
        const ticked = await this.#fireTickers(false);
        if (ticked.nextDueMs !== null) next = { fired: next.fired + ticked.fired, nextDueMs: Math.min(next.nextDueMs ?? Infinity, ticked.nextDueMs) };
      } catch (err) {
        this.observer.onError?.(null, err);
      }
      if (next.fired > 0) continue;
      // whole milliseconds, rounded up: a timer polled for a hair early is not due yet
      await this.#timerSleep.sleep(Math.max(0, Math.min(this.pollMs, Math.ceil(next.nextDueMs ?? this.pollMs))));
      // woken early (a timer set, a child ended, a held instance let go): poll again, but not
      // more often than every TIMER_POLL_GAP_MS — wake-ups come by the thousand per second
      const wait = began + TIMER_POLL_GAP_MS - Date.now();
      if (wait > 0 && this.#running) await sleep(wait);
    }
  }

  /**
   * Fires a round of due timers. A full round means a burst: more is due right now. Firing costs
   * tens of microseconds a timer and running a step about a millisecond, so the burst is fired
   * first, with claims held back (for at most a poll interval) rather than competing with it for
   * the same cores; the woken instances are then claimed in the order they fell due. One
   * statement polls; during a burst, TIMER_FIRERS go side by side. The first of them leases as
   * many of the instances it wakes as the pool has room for (the claim's rule, #room), so those
   * cost no claim; the claim loop is rung only for what was left unleased.
   */
  async #fireTimers(): Promise<Pick<FiredTimers, 'fired' | 'nextDueMs'>> {
    // a claim out for envs holding nothing (#claimKept) is counted first: the room depends on it
    await this.#keptClaim?.catch(() => {});
    const firers = this.#holdClaimsUntil === 0 ? 1 : TIMER_FIRERS;
    const room = this.#stopping ? 0 : this.#room();
    this.#firing++;
    this.#asking += room;
    let rounds: FiredTimers[];
    try {
      rounds = await Promise.all(
        Array.from({ length: firers }, (_, i) => fireDueTimers(this.db.pool, TIMER_BATCH, { limit: i === 0 ? room : 0, leaseMs: this.leaseMs })),
      );
    } finally {
      // in the same turn as the leases are counted in (#take): a claim in between would count
      // neither. A claim loop rung here runs after that turn.
      this.#firing--;
      this.#asking -= room;
      if (this.#claimDeferred) this.wake();
      this.#claimDeferred = false;
    }
    for (const r of rounds) this.#take(r.leased);
    for (const b of rounds.flatMap((r) => r.breaches)) this.observer.onSlaBreached?.(b);
    const fired = rounds.reduce((n, r) => n + r.fired, 0);
    const passedOver = rounds.reduce((n, r) => n + r.passedOver, 0);
    this.#passedOver = passedOver > 0;
    const burst = fired === firers * TIMER_BATCH;
    if (!burst) this.#holdClaimsUntil = 0;
    else if (this.#holdClaimsUntil === 0) this.#holdClaimsUntil = Date.now() + this.pollMs;
    if (!burst && rounds.some((r) => r.wokenLeft > 0)) this.wake();
    return { fired, nextDueMs: rounds[0]!.nextDueMs };
  }

  /**
   * How many instances the pool may lease now: none while every executor is busy (so a pool of
   * one never holds a second instance while its executor runs), else as many as fill the
   * reserve up to twice `concurrency`, less what statements out now have asked for.
   */
  #room(): number {
    if (this.#inflight >= this.concurrency) return 0;
    return Math.max(0, 2 * this.concurrency - this.#inflight - this.#asking - this.#starting);
  }

  /**
   * Claims once the reserve is spent and an executor is free (fewer than `concurrency` instances
   * held), as many as fill the reserve up again: more than `concurrency` a claim when work waits.
   * First, whatever the room, one instance of each env that asked for room holding none (wake).
   */
  async #claim(): Promise<number> {
    const kept = this.#wanted.size > 0 && !this.#stopping ? await this.#claimKept() : 0;
    const room = this.#room();
    if (room === 0 && this.#inflight < this.concurrency) this.#claimDeferred = true;
    if (room === 0 || Date.now() < this.#holdClaimsUntil) return kept;
    this.#asking += room;
    let claimed: Stored[];
    try {
      claimed = await claimWorkflows(this.db.pool, { limit: room, leaseMs: this.leaseMs, ...(this.#envWeights === undefined ? {} : { weights: this.#envWeights }) });
    } finally {
      this.#asking -= room;
    }
    this.#moreMayWait = claimed.length === room;
    this.#take(claimed);
    return kept + claimed.length;
  }

  /**
   * One instance of each env that asked for room while this pool held none of theirs, over the
   * pool's bound: the executors run an env that holds none of them at once (Slots). Without
   * weights, so each env's first instance comes first.
   */
  async #claimKept(): Promise<number> {
    // a timer poll out may be leasing these envs' instances, and the pool counts them only when it
    // returns: asked again then (claimed beside it, an env's first instance went over the bound)
    if (this.#firing > 0) {
      this.#claimDeferred = true;
      return 0;
    }
    const envs = [...this.#wanted].filter((env) => !this.#heldByEnv.has(env));
    this.#wanted.clear();
    if (envs.length === 0) return 0;
    // and a timer poll waits for it (#fireTimers), so the two never lease the same env's first at once
    const claiming = claimWorkflows(this.db.pool, { limit: envs.length, leaseMs: this.leaseMs, envs });
    this.#keptClaim = claiming;
    let claimed: Stored[];
    try {
      claimed = await claiming;
    } finally {
      this.#keptClaim = null;
    }
    this.#take(claimed);
    return claimed.length;
  }

  /** Drives instances this pool has just leased (claimed, or woken by its timer poll). */
  #take(leased: Stored[]): void {
    for (const stored of leased) {
      const { env } = stored.instance;
      this.#inflight++;
      this.#heldByEnv.set(env, (this.#heldByEnv.get(env) ?? 0) + 1);
      void this.#drive(stored)
        .catch((err) => this.observer.onError?.(stored.instance.id, err))
        .finally(() => {
          this.#inflight--;
          const held = this.#heldByEnv.get(env)! - 1;
          if (held > 0) this.#heldByEnv.set(env, held);
          else this.#heldByEnv.delete(env);
          if (this.#moreMayWait && this.#inflight < this.concurrency) this.wake();
        });
    }
  }

  /** Runs prepared attempts of one instance for as long as it holds the lease and has one. */
  async #drive(start: Stored): Promise<void> {
    const token = start.leaseToken!;
    const lease = this.#heartbeats.keep(start.instance.id, token, start.instance);
    // every span of this drive joins the instance's trace (migration 0032)
    const root = instanceContext(start);
    traceQueueWait(root, start);
    try {
      await this.#driveLeased(start, token, lease, root);
    } finally {
      lease.stop();
    }
  }

  async #driveLeased(start: Stored, token: string, lease: LeaseKeeper, root: Context): Promise<void> {
    let stored = start;
    /** The permits this attempt needs, and what the commit that kept the lease answered for them (migration 0037). */
    let ahead: Ahead | null = null;
    /** The room this attempt took from this engine's loans instead (migration 0053), given back once its call has ended. */
    let allotted: Allotment | null = null;
    try {
      for (;;) {
        const { instance } = stored;
        const logic = await this.logics.get(instance.env, instance.logicHash);
        if (instance.state === 'waiting') this.observer.onWake?.(logic, stored);
        // the core gives the final state: `processing` where this worker goes on with the next attempt
        const goOn = !this.#stopping;
        const work = claimedWork(instance);
        // the permits this work needs (none for most: no statement); without them the instance
        // waits, its lease let go by acquire_permits(), costing no attempt (migration 0027). The
        // commit that kept the lease took them already, unless it was a transaction of its own.
        /** Whether this work took permits others wait on: its commit is followed by a release. */
        let held = false;
        let needs: PermitNeed[] = ahead?.needs ?? [];
        if (this.permits !== null && work.do !== 'wakes') {
          if (ahead === null) {
            needs = await this.permits.needs(logic, instance, work.do);
            // every one covered by a loan of this engine: none taken in the database
            allotted = this.permits.allot(needs);
            if (allotted !== null) needs = [];
          }
          if (needs.length > 0) {
            if (lease.lost) return;
            const { wait, waiters } =
              ahead?.taken ?? (await lease.committing(() => this.#acquire({ id: instance.id, token, rowVersion: stored.rowVersion, needs })));
            this.observer.onPermits?.(logic, instance, needs, wait);
            if (wait !== null) {
              if (wait.wakeInMs !== null) setTimeout(() => this.wake(), wait.wakeInMs).unref();
              return;
            }
            held = waiters;
          }
        }
        const decided =
          work.do === 'begin'
            ? { t: (await apply(logic, instance, work.event, goOn))!, event: work.event }
            : work.do === 'wakes'
              ? await traceWakes(root, stored, () => applyWakes(this.db, logic, stored, goOn))
              : await this.#executors.run(instance.env, () => this.#step(logic, instance, lease, goOn, root));
        // its call has ended: the room it took from a loan is free again
        allotted?.release();
        allotted = null;
        // fenced out while it worked or waited (the observer has been told): nobody's to commit
        if (lease.lost) return;
        if (decided === 'abandoned') {
          await asScheduler(this.db, (c) => letLeaseLapse(c, { id: instance.id, token }));
          return;
        }
        if (decided === null) {
          await lease.committing(() => asScheduler(this.db, (c) => releaseWakes(c, { id: instance.id, rowVersion: stored.rowVersion })));
          this.#heldWokenLetGo();
          return;
        }
        let { t, event } = decided;
        let keep = keepsGoing(t, goOn);
        // its attempt permits are the lease's: a commit that keeps the lease yields those the next attempt does not need (migration 0039)
        const holds = needs.some((n) => !n.workflowWide);
        // the next attempt's work without effects (a module run) overlaps this commit
        if (keep) startAhead(logic, t.instance, this.executors, this.timeoutCaps);
        let committed: boolean;
        try {
          ({ committed, ahead } = await lease.committing(() => this.#commit(logic, stored, t, event, token, keep, holds)));
        } catch (err) {
          // Postgres refused the data of an attempt's result (checked before, yet refused): sending
          // it again cannot succeed, so the attempt fails permanently instead (storable.ts)
          if (!refusedForData(err) || (event.type !== 'outcome' && event.type !== 'progress')) throw err;
          event = { type: 'outcome', outcome: unstorableCommit(err, event.type === 'outcome' ? event.outcome : null) };
          t = (await apply(logic, instance, event, goOn))!;
          keep = keepsGoing(t, goOn);
          ({ committed, ahead } = await lease.committing(() => this.#commit(logic, stored, t, event, token, keep, holds)));
        }
        allotted = ahead?.allotted ?? null;
        this.observer.onTransition?.(stored.instance, t, committed);
        // what it held is dead with this commit (row_version moved on): wake who waits on it now
        const ended = TERMINAL_STATES.has(t.instance.state);
        // it joined a line for its next attempt, giving up what its lease held: whoever stood in line
        // with it (in the same batch, before any notice could tell this engine) may have room now
        const queued = holds && ahead?.taken?.wait != null;
        if (this.permits !== null && (held || queued || (needs.length > 0 && this.permits.contended(needs)) || (ended && logic.concurrency !== undefined))) {
          await this.permits.release({ id: instance.id, ended }).catch((err) => this.observer.onError?.(instance.id, err));
        }
        // let the timer loop look again when what it waits for may have changed: a new timer may
        // fall due before its next poll, and a child that ended left its parent a signal due now
        const childEnded = t.instance.parentId !== null && TERMINAL_STATES.has(t.instance.state);
        if (committed && (childEnded || t.commands.some((c) => c.type === 'timer'))) this.#timers.ring();
        if (committed && instance.state === 'waiting') this.#heldWokenLetGo();
        // a retry after backoff is claimable at run_at: look for it then, not at the next poll
        if (committed && t.runAfterMs !== null) setTimeout(() => this.wake(), t.runAfterMs).unref();
        // children spawned, or the instance handed over: claimable now, whatever the last claim found
        const handedOver = !keep && t.runAfterMs === null && (t.instance.state === 'pending' || t.instance.state === 'compensating');
        if (committed && (handedOver || t.commands.some((c) => c.type === 'spawn'))) this.wake();
        if (!committed || !keep) return;
        stored = { instance: t.instance, rowVersion: stored.rowVersion + 1, leaseToken: token, wakes: [] };
        lease.holding(t.instance);
      }
    } finally {
      allotted?.release();
    }
  }

  /**
   * A woken instance this pool held has been let go (its wake-up committed or released): a timer
   * of it passed over meanwhile is due now. Only a poll that ran while it was held can have
   * passed one over — one still out, or the last, if it reported any — so only then does the
   * timer loop look again (a ring while it polls is kept for its next sleep).
   */
  #heldWokenLetGo(): void {
    if (this.#firing > 0 || this.#passedOver) this.#timers.ring();
  }

  /**
   * Executes the prepared attempt and lets the core decide what its result means. Null when the
   * lease was lost while the instance waited for an executor: nothing is run. `abandoned` when
   * stop() abandoned its module run: nothing is to be committed.
   */
  async #step(
    logic: LogicVersion,
    instance: Instance,
    lease: LeaseKeeper,
    goOn: boolean,
    root: Context,
  ): Promise<{ t: Transition; event: TraceEvent } | null | 'abandoned'> {
    if (lease.lost) return null;
    const began = performance.now();
    const halt = this.#halt.signal;
    const attempt = (trace?: Context) => executeAttempt(logic, instance, this.executors, this.tokens, { signal: lease.signal, halt, trace }, this.timeoutCaps);
    const handler = this.#circuits?.handlerOf(logic, instance) ?? null;
    const held = handler === null ? null : await this.#circuits!.before(instance, handler, attemptTimeoutMs(logic, instance.ctx.running!));
    const result = storableResult(held ?? (await traceAttempt(root, instance, attempt, isOneCall(logic, instance.ctx.running!))), this.limits);
    if (handler !== null && held === null && result.status !== 'progress') await this.#circuits!.after(instance, handler, result);
    if (halt.aborted && result.status === 'failed' && result.error.code === 'FUNC_ABORTED') return 'abandoned';
    this.observer.onAttempt?.(logic, instance, result, (performance.now() - began) / 1000);
    const event: TraceEvent = result.status === 'progress' ? { type: 'progress', record: result.record } : { type: 'outcome', outcome: result };
    // an attempt's result always decides something
    return { t: (await apply(logic, instance, event, goOn))!, event };
  }

  /**
   * Takes the permits of a claimed instance's first attempt, in the next batched commit rather
   * than a transaction of its own (migration 0038): granted, or the instance waits, its lease let go.
   */
  async #acquire(args: { id: string; token: string; rowVersion: number; needs: PermitNeed[] }): Promise<Acquired> {
    return (await this.#batcher.commit(acquireParam(args), true)).permits!;
  }

  /**
   * Commits, retrying while the connection fails. A lost connection may or may not have
   * committed; retrying is safe because the row_version guard turns a second application into a
   * no-op. A retry that finds the guard moved asks whether the move was this worker's own commit
   * (its receipt: lease token and row version) or someone else's (fenced). The lease keeper goes
   * on beating meanwhile, so a slow recovery does not cost the lease.
   */
  async #commit(
    logic: LogicVersion,
    from: Stored,
    t: Transition,
    event: TraceEvent,
    token: string,
    keep: boolean,
    holds: boolean,
  ): Promise<{ committed: boolean; ahead: Ahead | null }> {
    const id = from.instance.id;
    const keepLease = keep ? { token, ttlMs: this.leaseMs } : null;
    // the permits of the attempt it goes on with ride in this commit (migration 0037), unless a
    // loan of this engine covers every one (migration 0053)
    const next = keep ? claimedWork(t.instance).do : 'wakes';
    let needs = this.permits !== null && next !== 'wakes' ? await this.permits.needs(logic, t.instance, next) : null;
    const allotted = needs !== null ? this.permits!.allot(needs) : null;
    if (allotted !== null) needs = [];
    for (let attempt = 1; ; attempt++) {
      try {
        // one statement, shared with the other instances committing now: commit_transition()
        // scopes each row to its instance's env (a fan-out still takes a transaction of its own)
        let taken: Acquired | null = null;
        const send = async (param: string, takesPermits: boolean) => {
          const receipt = await this.#batcher.commit(param, takesPermits);
          taken = receipt.permits;
          return receipt;
        };
        const opts = { keepLease, cancelChildren: this.#cancelTree, by: token, event, send, heldPermits: holds, ...(needs === null ? {} : { permits: needs }) };
        if (await commitTransition(this.db, from, t, opts)) return { committed: true, ahead: needs === null ? null : { needs, taken, allotted } };
        allotted?.release();
        const landed = attempt > 1 && (await asScheduler(this.db, (c) => commitLanded(c, { id, token, rowVersion: from.rowVersion })));
        // landed but unanswered: its permits (if it took them) are taken again, as the same holder's
        return { committed: landed, ahead: null };
      } catch (err) {
        if ((err as { code?: string }).code === 'FLOW_TRANSITION_REFUSED' || refusedForData(err) || attempt >= 20) {
          allotted?.release();
          throw err;
        }
        await sleep(Math.min(2000, 50 * 2 ** attempt));
      }
    }
  }
}
