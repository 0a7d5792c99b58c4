import { Worker } from 'node:worker_threads';
import { FuncErrorCode } from '../errors.ts';
import type { RunTask, WorkerMessage, WorkerOutcome } from './protocol.ts';

const WORKER_URL = new URL('./worker-entry.mjs', import.meta.url);

export interface WorkerPoolOptions {
  size: number;
  heapMb: number;
}

export type LogSink = (level: 'debug' | 'info' | 'warn' | 'error', message: string) => void;

interface Job {
  task: RunTask;
  timeoutMs: number;
  onLog: LogSink;
  resolve: (outcome: WorkerOutcome) => void;
}

interface Slot {
  worker: Worker;
  ready: boolean;
  job: Job | null;
  timer: NodeJS.Timeout | null;
}

/**
 * A fixed number of worker threads, one run at a time each, fed from a FIFO
 * queue. A wasm loop cannot be interrupted on its own thread, so a run that
 * passes its timeout has its worker terminated and replaced; the parent's
 * event loop and the other workers never wait on it.
 */
export class WorkerPool {
  readonly #opts: WorkerPoolOptions;
  readonly #slots: Slot[] = [];
  readonly #queue: Job[] = [];
  #nextId = 1;
  #closed = false;

  constructor(opts: WorkerPoolOptions) {
    this.#opts = opts;
  }

  run(task: Omit<RunTask, 'id'>, timeoutMs: number, onLog: LogSink): Promise<WorkerOutcome> {
    if (this.#closed) return Promise.resolve(closedOutcome());
    return new Promise((resolve) => {
      this.#queue.push({ task: { ...task, id: this.#nextId++ }, timeoutMs, onLog, resolve });
      this.#pump();
    });
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const job of this.#queue.splice(0)) job.resolve(closedOutcome());
    const slots = this.#slots.splice(0);
    for (const slot of slots) this.#finish(slot, closedOutcome());
    await Promise.all(slots.map((slot) => slot.worker.terminate()));
  }

  #pump(): void {
    while (this.#queue.length > 0) {
      const idle = this.#slots.find((s) => s.ready && s.job === null);
      if (idle !== undefined) this.#dispatch(idle, this.#queue.shift()!);
      else if (this.#slots.length < this.#opts.size) this.#spawn();
      else break;
    }
    this.#updateRefs();
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
      this.#failQueue(`could not start a worker thread: ${messageOf(err)}`);
      return;
    }
    const slot: Slot = { worker, ready: false, job: null, timer: null };
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
      job.resolve({ kind: 'failed', code: FuncErrorCode.BAD_RUN_REQUEST, message: `run request cannot be sent to a worker: ${messageOf(err)}` });
      return;
    }
    slot.job = job;
    slot.timer = setTimeout(() => this.#onTimeout(slot), job.timeoutMs);
  }

  #onMessage(slot: Slot, msg: WorkerMessage): void {
    if (msg.type === 'ready') {
      slot.ready = true;
      this.#pump();
    } else if (msg.type === 'log') {
      if (slot.job?.task.id === msg.id) slot.job.onLog(msg.level, msg.message);
    } else if (slot.job?.task.id === msg.id) {
      this.#finish(slot, msg.outcome);
      this.#pump();
    }
  }

  #onTimeout(slot: Slot): void {
    const ms = slot.job?.timeoutMs;
    this.#remove(slot);
    this.#finish(slot, {
      kind: 'failed',
      code: FuncErrorCode.TIMEOUT,
      message: `module ran longer than ${ms} ms and was stopped; look for an endless loop or raise the step's timeoutMs`,
    });
    void slot.worker.terminate();
    this.#pump();
  }

  #onDeath(slot: Slot, err: Error): void {
    if (!this.#remove(slot)) return;
    const oom = (err as NodeJS.ErrnoException).code === 'ERR_WORKER_OUT_OF_MEMORY';
    this.#finish(slot, {
      kind: 'failed',
      code: oom ? FuncErrorCode.MEMORY : FuncErrorCode.WORKER_CRASHED,
      message: oom ? `the worker ran out of heap (${this.#opts.heapMb} MiB) running the module` : `the worker running the module died: ${err.message}`,
    });
    void slot.worker.terminate();
    if (!slot.ready) this.#failQueue(`a worker thread failed to start: ${err.message}`);
    else this.#pump();
  }

  #finish(slot: Slot, outcome: WorkerOutcome): void {
    if (slot.timer !== null) clearTimeout(slot.timer);
    slot.timer = null;
    const job = slot.job;
    slot.job = null;
    job?.resolve(outcome);
  }

  #remove(slot: Slot): boolean {
    const i = this.#slots.indexOf(slot);
    if (i < 0) return false;
    this.#slots.splice(i, 1);
    return true;
  }

  #failQueue(message: string): void {
    for (const job of this.#queue.splice(0)) {
      job.resolve({ kind: 'failed', code: FuncErrorCode.WORKER_CRASHED, message });
    }
    this.#updateRefs();
  }

  /** Idle workers must not keep the process alive; busy ones (or ones a queued run waits for) must. */
  #updateRefs(): void {
    const waiting = this.#queue.length > 0;
    for (const slot of this.#slots) {
      if (waiting || slot.job !== null) slot.worker.ref();
      else slot.worker.unref();
    }
  }
}

function closedOutcome(): WorkerOutcome {
  return { kind: 'failed', code: FuncErrorCode.RUNTIME_CLOSED, message: 'the Func runtime was closed before the run finished' };
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
