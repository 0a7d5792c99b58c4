import { execFile, execFileSync } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/**
 * A throw-away Postgres server of its own, for the suites that crash-restart the server: restarting
 * the shared CI server (FLOW_TEST_PGDATA) would break whichever other test file runs beside them.
 * Built with the same binaries (FLOW_TEST_PGBIN) and, when running as root, as FLOW_TEST_PG_SU.
 */
export class PgCluster {
  private constructor(
    readonly dir: string,
    readonly port: number,
  ) {}

  static available(): boolean {
    return Boolean(process.env['FLOW_TEST_PGBIN'] && process.env['FLOW_TEST_PGDATA']);
  }

  static async create(): Promise<PgCluster> {
    const dir = mkdtempSync(join(tmpdir(), 's8flow-pg-'));
    const su = superuser();
    if (su !== null) chownSync(dir, Number(execFileSync('id', ['-u', su]).toString().trim()), Number(execFileSync('id', ['-g', su]).toString().trim()));
    const cluster = new PgCluster(dir, await freePort());
    live.add(cluster);
    await cluster.#pg('initdb', ['-D', cluster.data, '-A', 'trust', '-U', 'postgres', '--no-sync']);
    const opts = `-p ${cluster.port} -k ${dir} -c listen_addresses=127.0.0.1 -c max_connections=100`;
    await cluster.#pg('pg_ctl', ['-D', cluster.data, '-l', join(dir, 'server.log'), '-w', '-o', opts, 'start']);
    return cluster;
  }

  get data(): string {
    return join(this.dir, 'data');
  }

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  /** Crashes the server (no checkpoint, every connection cut) and waits until it accepts connections again. */
  async restartImmediate(): Promise<void> {
    await this.#pg('pg_ctl', ['-D', this.data, '-l', join(this.dir, 'server.log'), '-m', 'immediate', '-w', 'restart']);
  }

  async destroy(): Promise<void> {
    await this.#pg('pg_ctl', ['-D', this.data, '-m', 'immediate', '-w', 'stop']).catch(() => {});
    live.delete(this);
    rmSync(this.dir, { recursive: true, force: true });
  }

  /** Runs a server binary, as FLOW_TEST_PG_SU when we are root (Postgres refuses to run as root). */
  async #pg(bin: string, args: string[]): Promise<void> {
    const quoted = [join(process.env['FLOW_TEST_PGBIN']!, bin), ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
    // the server inherits pg_ctl's stdout: unless it is redirected, this would never return
    const cmd = `${quoted} >>${join(this.dir, `${bin}.out`)} 2>&1`;
    const su = superuser();
    await run(su === null ? 'bash' : 'su', su === null ? ['-c', cmd] : [su, '-s', '/bin/bash', '-c', cmd]);
  }
}

function superuser(): string | null {
  const su = process.env['FLOW_TEST_PG_SU'];
  return su && process.getuid?.() === 0 ? su : null;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** Servers still up when the process exits are stopped, so none outlives a crashed test run. */
const live = new Set<PgCluster>();
process.once('exit', () => {
  for (const c of live) {
    try {
      const cmd = `${join(process.env['FLOW_TEST_PGBIN']!, 'pg_ctl')} -D ${c.data} -m immediate stop`;
      const su = superuser();
      execFileSync(su === null ? 'bash' : 'su', su === null ? ['-c', cmd] : [su, '-s', '/bin/bash', '-c', cmd], { stdio: 'ignore' });
      rmSync(c.dir, { recursive: true, force: true });
    } catch {}
  }
});
