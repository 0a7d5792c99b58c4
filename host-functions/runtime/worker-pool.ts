import { Worker } from 'node:worker_threads';
import { FuncErrorCode } from '../errors.ts';
import type { RunTask, WorkerMessage, WorkerOutcome } from './protocol.ts';

const WORKER_URL = new URL('./worker-entry.mjs', import.meta.url);
/** The longest delay a Node timer takes; a longer one would fire at once. */
const MAX_TIMER_MS = 2_147_483_647;

export interface WorkerPoolOptions {
  size: number;
  heapMb: number;
}

export type LogSink = (level: 'debug' | 'info' | 'warn' | 'error', message: string) => void;

/** What a run waits in, and is served from: one queue per key (the engine's env). */
export interface RunOptions {
  timeoutMs: number;
  onLog: LogSink;
  queue: string;
  signal?: AbortSignal | undefined;
}

interface Job {
  task: RunTask;
  opts: RunOptions;
  resolve: (outcome: WorkerOutcome) => void;
  /** The run's whole time budget, queued and running: set when it is queued. */
  timer: NodeJS.Timeout | null;
  onAbort: (() => void) | null;
  /** The worker running it, once dispatched. */
  slot: Slot | null;
}

interface Slot {
  worker: Worker;
  ready: boolean;
  job: Job | null;
}

/**
 * Worker threads, one run at a time each. A wasm loop cannot be interrupted on its own thread,
 * so a run that passes its timeout, or whose signal aborts (a cancelled instance, an engine
 * stopping), has its worker terminated and replaced; the parent's event loop and the other
 * workers never wait on it.
 *
 * Fair shares (ARCHITECTURE.md, Tenancy): runs wait in one FIFO queue per key, and the queues are
 * served round-robin, so a key with a thousand runs queued delays another key's run by at most
 * one turn. A run cannot be preempted, so turns alone do not help when one key's runs hold every
 * worker (two modules that spin until their timeout): a key that holds no worker then gets one
 * beyond `size`, up to twice `size` in all, and such an extra worker is let go once idle. One key
 * never holds more than half the pool (rounded up): runs that spin take at most that many cores
 * from the engine's thread, Postgres and everyone else. The timeout of a run counts from when it was queued:
 * time spent waiting for a worker is part of its budget.
 */
export class WorkerPool {
  readonly #opts: WorkerPoolOptions;
  readonly #slots: Slot[] = [];
  /** Queued runs per key; the Map's order is the round-robin order (a served key moves last). */
  readonly #queues = new Map<string, Job[]>();
  /** Workers running a run of each key. */
  readonly #held = new Map<string, number>();
  /** The most workers one key may hold at once: half the pool, so its runs never take every core. */
  readonly #perKey: number;
  #nextId = 1;
  #closed = false;

  constructor(opts: WorkerPoolOptions) {
    this.#opts = opts;
    this.#perKey = Math.max(1, Math.ceil(opts.size / 2));
  }

  run(task: Omit<RunTask, 'id'>, opts: RunOptions): Promise<WorkerOutcome> {
    if (this.#closed) return Promise.resolve(closedOutcome());
    if (opts.signal?.aborted) return Promise.resolve(abortedOutcome());
    return new Promise((resolve) => {
      const job: Job = { task: { ...task, id: this.#nextId++ }, opts, resolve, timer: null, onAbort: null, slot: null };
      job.timer = setTimeout(() => this.#end(job, timeoutOutcome(opts.timeoutMs)), Math.min(MAX_TIMER_MS, opts.timeoutMs));
      if (opts.signal !== undefined) {
        job.onAbort = () => this.#end(job, abortedOutcome());
        opts.signal.addEventListener('abort', job.onAbort, { once: true });
      }
      const queue = this.#queues.get(opts.queue);
      if (queue === undefined) this.#queues.set(opts.queue, [job]);
      else queue.push(job);
      this.#pump();
    });
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const queue of this.#queues.values()) for (const job of queue) this.#settle(job, closedOutcome());
    this.#queues.clear();
    const slots = this.#slots.splice(0);
    for (const slot of slots) if (slot.job !== null) this.#settle(slot.job, closedOutcome());
    await Promise.all(slots.map((slot) => slot.worker.terminate()));
  }

  /** Serves the queues in turn while a worker is free for one of them, starting workers as the rules allow. */
  #pump(): void {
    if (this.#closed) return;
    for (let served = true; served; ) {
      served = false;
      for (const [key, queue] of this.#queues) {
        const held = this.#held.get(key) ?? 0;
        if (held >= this.#perKey) continue;
        const idle = this.#slots.find((s) => s.ready && s.job === null);
        if (idle === undefined) {
          this.#grow(held === 0);
          continue;
        }
        this.#dispatch(idle, queue.shift()!);
        this.#queues.delete(key);
        if (queue.length > 0) this.#queues.set(key, queue);
        served = true;
        break;
      }
    }
    this.#shrink();
    this.#updateRefs();
  }

  /** Starts a worker: up to `size` for anyone, beyond it (to twice `size`) for a key holding none. */
  #grow(holdsNone: boolean): void {
    const starting = this.#slots.filter((s) => !s.ready).length;
    let queued = 0;
    for (const queue of this.#queues.values()) queued += queue.length;
    if (this.#slots.length < this.#opts.size && starting < queued) this.#spawn();
    else if (holdsNone && starting === 0 && this.#slots.length < 2 * this.#opts.size) this.#spawn();
  }

  /** Lets idle workers beyond `size` go once no queue waits. */
  #shrink(): void {
    if (this.#queues.size > 0) return;
    while (this.#slots.length > this.#opts.size) {
      const idle = this.#slots.find((s) => s.ready && s.job === null);
      if (idle === undefined) return;
      this.#remove(idle);
      void idle.worker.terminate();
    }
  }

  #spawn(): void {
    let worker: Worker;
    try {
      worker = new Worker(WORKER_URL, {
        // Explicit, so the worker does not inherit the parent's TypeScript loader flags.
        execArgv: ['--disable-warning=ExperimentalWarning'],
        resourceLimits: { maxOldGenerationSizeMb: this.#opts.heapMb },
      });
    } catch (err) {
      this.#failQueues(`could not start a worker thread: ${messageOf(err)}`);
      return;
    }
    const slot: Slot = { worker, ready: false, job: null };
    this.#slots.push(slot);
    worker.on('message', (msg: WorkerMessage) => this.#onMessage(slot, msg));
    worker.on('error', (err) => this.#onDeath(slot, err));
    worker.on('exit', (code) => this.#onDeath(slot, new Error(`worker exited with code ${code}`)));
  }

  #dispatch(slot: Slot, job: Job): void {
    try {
      slot.worker.postMessage(job.task);
    } catch (err) {
      // Only values that cannot be cloned get here (e.g. a function inside a recorded response).
      this.#settle(job, { kind: 'failed', code: FuncErrorCode.BAD_RUN_REQUEST, message: `run request cannot be sent to a worker: ${messageOf(err)}` });
      return;
    }
    slot.job = job;
    job.slot = slot;
    this.#held.set(job.opts.queue, (this.#held.get(job.opts.queue) ?? 0) + 1);
  }

  #onMessage(slot: Slot, msg: WorkerMessage): void {
    if (msg.type === 'ready') {
      slot.ready = true;
      this.#pump();
    } else if (msg.type === 'log') {
      if (slot.job?.task.id === msg.id) slot.job.opts.onLog(msg.level, msg.message);
    } else if (slot.job?.task.id === msg.id) {
      this.#settle(slot.job, msg.outcome);
      this.#pump();
    }
  }

  /** A run ends before its worker answers (timeout, abort): out of its queue, or its worker stopped. */
  #end(job: Job, outcome: WorkerOutcome): void {
    const slot = job.slot;
    if (slot === null) {
      const queue = this.#queues.get(job.opts.queue);
      const i = queue?.indexOf(job) ?? -1;
      if (i < 0) return; // settled already
      queue!.splice(i, 1);
      if (queue!.length === 0) this.#queues.delete(job.opts.queue);
      this.#settle(job, outcome);
    } else {
      this.#remove(slot);
      this.#settle(job, outcome);
      void slot.worker.terminate();
    }
    this.#pump();
  }

  #onDeath(slot: Slot, err: Error): void {
    if (!this.#remove(slot)) return;
    const oom = (err as NodeJS.ErrnoException).code === 'ERR_WORKER_OUT_OF_MEMORY';
    if (slot.job !== null) {
      this.#settle(slot.job, {
        kind: 'failed',
        code: oom ? FuncErrorCode.MEMORY : FuncErrorCode.WORKER_CRASHED,
        message: oom ? `the worker ran out of heap (${this.#opts.heapMb} MiB) running the module` : `the worker running the module died: ${err.message}`,
      });
    }
    void slot.worker.terminate();
    if (!slot.ready) this.#failQueues(`a worker thread failed to start: ${err.message}`);
    else this.#pump();
  }

  /** Resolves a run once, and frees what it held: its timer, its abort listener, its worker. */
  #settle(job: Job, outcome: WorkerOutcome): void {
    if (job.timer !== null) clearTimeout(job.timer);
    job.timer = null;
    if (job.onAbort !== null) job.opts.signal?.removeEventListener('abort', job.onAbort);
    job.onAbort = null;
    const slot = job.slot;
    if (slot !== null) {
      job.slot = null;
      slot.job = null;
      const held = (this.#held.get(job.opts.queue) ?? 1) - 1;
      if (held > 0) this.#held.set(job.opts.queue, held);
      else this.#held.delete(job.opts.queue);
    }
    job.resolve(outcome);
  }

  #remove(slot: Slot): boolean {
    const i = this.#slots.indexOf(slot);
    if (i < 0) return false;
    this.#slots.splice(i, 1);
    return true;
  }

  #failQueues(message: string): void {
    for (const queue of this.#queues.values()) {
      for (const job of queue) this.#settle(job, { kind: 'failed', code: FuncErrorCode.WORKER_CRASHED, message });
    }
    this.#queues.clear();
    this.#updateRefs();
  }

  /** Idle workers must not keep the process alive; busy ones (or ones a queued run waits for) must. */
  #updateRefs(): void {
    const waiting = this.#queues.size > 0;
    for (const slot of this.#slots) {
      if (waiting || slot.job !== null) slot.worker.ref();
      else slot.worker.unref();
    }
  }
}

function timeoutOutcome(ms: number): WorkerOutcome {
  return {
    kind: 'failed',
    code: FuncErrorCode.TIMEOUT,
    message: `module did not finish within ${ms} ms of being queued and was stopped; look for an endless loop, or raise the step's timeoutMs (the engine caps it)`,
  };
}

function abortedOutcome(): WorkerOutcome {
  return { kind: 'failed', code: FuncErrorCode.ABORTED, message: 'the run was abandoned (its instance was cancelled or taken over, or the engine is stopping) and its worker stopped' };
}

function closedOutcome(): WorkerOutcome {
  return { kind: 'failed', code: FuncErrorCode.RUNTIME_CLOSED, message: 'the Func runtime was closed before the run finished' };
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
