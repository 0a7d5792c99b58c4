import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const BIN = fileURLToPath(new URL('../../bin/s8flow.mjs', import.meta.url));

/** Every worker process any test started, so none outlives the test run, even on a crash. */
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});

export interface WorkerProcessOptions {
  databaseUrl: string;
  schema: string;
  env: string;
  /** FLOW_HANDLER_TEST_URL: where the `test` handler's calls go. */
  handlerUrl: string;
  concurrency?: number;
  leaseMs?: number;
  pollMs?: number;
  /** Extra arguments of `s8flow start` (e.g. `--artifacts DIR`). */
  args?: string[];
  /** Extra environment (e.g. PGAPPNAME to recognise its connections). */
  extraEnv?: Record<string, string>;
  /** How long to wait for the "ready" line. (Default: 30000) */
  readyTimeoutMs?: number;
  /** Serve the HTTP API too (then pass `--port` in `args`); otherwise `--no-api`. (Default: false) */
  api?: boolean;
  /** A command the process runs under (e.g. `ip netns exec NS`). (Default: none) */
  launcher?: string[];
}

/** One `s8flow start` process (a single worker, no supervisor): its pid is the worker itself. */
export class WorkerProcess {
  readonly child: ChildProcess;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** The last lines it wrote, for failure messages. */
  readonly output: string[] = [];
  #exit: { code: number | null; signal: NodeJS.Signals | null } | null = null;

  private constructor(child: ChildProcess) {
    this.child = child;
    live.add(child);
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        live.delete(child);
        this.#exit = { code, signal };
        resolve({ code, signal });
      });
    });
    const keep = (chunk: Buffer) => {
      for (const line of chunk.toString('utf8').split('\n')) if (line.trim() !== '') this.output.push(line);
      if (this.output.length > 200) this.output.splice(0, this.output.length - 200);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
  }

  /** Starts a worker and resolves once it has migrated, started its pool and said so. */
  static async start(o: WorkerProcessOptions): Promise<WorkerProcess> {
    const args = ['start', '--concurrency', String(o.concurrency ?? 4), '--lease-ms', String(o.leaseMs ?? 1500), '--poll-ms', String(o.pollMs ?? 50), ...(o.api ? [] : ['--no-api']), ...(o.args ?? [])];
    const [cmd, ...pre] = [...(o.launcher ?? []), process.execPath];
    const child = spawn(cmd!, [...pre, BIN, ...args], {
      env: {
        ...process.env,
        DATABASE_URL: o.databaseUrl,
        FLOW_SCHEMA: o.schema,
        FLOW_ENV: o.env,
        FLOW_HANDLER_TEST_URL: o.handlerUrl,
        ...o.extraEnv,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const w = new WorkerProcess(child);
    await w.#ready(o.readyTimeoutMs ?? 30_000);
    return w;
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** True while the process runs (a stopped process counts as alive). */
  get alive(): boolean {
    return this.#exit === null && this.child.exitCode === null && this.child.signalCode === null;
  }

  signal(sig: NodeJS.Signals): void {
    if (this.alive) this.child.kill(sig);
  }

  /** SIGKILL, and wait until the process is gone. */
  async kill(): Promise<void> {
    this.signal('SIGKILL');
    await this.exited;
  }

  /** SIGTERM (graceful: in-flight attempts finish), SIGKILL if it takes longer than `ms`. */
  async stop(ms = 10_000): Promise<void> {
    if (!this.alive) return;
    this.signal('SIGCONT');
    this.signal('SIGTERM');
    const timer = setTimeout(() => this.signal('SIGKILL'), ms);
    await this.exited;
    clearTimeout(timer);
  }

  async #ready(timeoutMs: number): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => fail(new Error(`worker ${this.pid} not ready after ${timeoutMs} ms:\n${this.output.join('\n')}`)), timeoutMs);
      const onData = (chunk: Buffer) => {
        if (chunk.toString('utf8').includes(' ready (')) {
          cleanup();
          resolve();
        }
      };
      const onExit = () => fail(new Error(`worker ${this.pid} exited before it was ready:\n${this.output.join('\n')}`));
      const cleanup = () => {
        clearTimeout(timer);
        this.child.stdout?.off('data', onData);
        this.child.off('exit', onExit);
      };
      const fail = (err: Error) => {
        cleanup();
        this.child.kill('SIGKILL');
        reject(err);
      };
      this.child.stdout?.on('data', onData);
      this.child.once('exit', onExit);
    });
  }
}

/** Kills every given worker that still runs (for `finally` / `afterAll`). */
export async function killAll(workers: Iterable<WorkerProcess>): Promise<void> {
  await Promise.all([...workers].map((w) => w.kill()));
}
