import { execFile, execFileSync } from 'node:child_process';
import { appendFileSync, chownSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Net } from './netns.ts';

const run = promisify(execFile);
const PGBIN = process.env['FLOW_TEST_PGBIN'] ?? '/usr/lib/postgresql/15/bin';
const PORT = 5432;

/** Why no server can be started here (null when one can): the Postgres 15 binaries and a `postgres` user. */
export function postgresUnavailable(): string | null {
  if (!existsSync(join(PGBIN, 'postgres'))) {
    return `no Postgres server binaries in ${PGBIN} (install Debian's postgresql, or set FLOW_TEST_PGBIN)`;
  }
  return null;
}

/**
 * A real Postgres 15 server inside a node's namespace, run as the `postgres` user, listening on the
 * node's address and on a unix socket in its own directory. The engines reach it over the network;
 * the test reaches it through the socket (`localUrl`), which no network fault touches.
 */
export class NetPostgres {
  private constructor(
    readonly net: Net,
    readonly node: string,
    readonly dir: string,
  ) {}

  get data(): string {
    return join(this.dir, 'data');
  }

  /** Over the network, from another node. */
  get url(): string {
    return `postgres://postgres@${this.net.node(this.node).addr}:${PORT}/postgres`;
  }

  /** Through the unix socket, from the test process. */
  get localUrl(): string {
    return `postgres://postgres@/postgres?host=${encodeURIComponent(this.dir)}&port=${PORT}`;
  }

  /**
   * A primary. With `syncStandby`, commits wait for that standby (`synchronous_commit = on`): a
   * commit the engine saw acknowledged is on the standby too when the primary dies.
   */
  static async primary(net: Net, node: string, opts: { syncStandby?: string } = {}): Promise<NetPostgres> {
    const pg = new NetPostgres(net, node, privateDir());
    return pg.#orDestroy(async () => {
      await pg.#as(['initdb', '-D', pg.data, '-A', 'trust', '-U', 'postgres', '--no-sync']);
      pg.#configure([
        'wal_level = replica',
        'max_wal_senders = 5',
        'synchronous_commit = on',
        ...(opts.syncStandby ? [`synchronous_standby_names = '${opts.syncStandby}'`] : []),
      ]);
      await pg.start();
    });
  }

  /** A streaming replica of `primary` (pg_basebackup -R over the network), reporting as `name`. */
  static async replica(net: Net, node: string, primary: NetPostgres, name: string): Promise<NetPostgres> {
    const pg = new NetPostgres(net, node, privateDir());
    const { addr } = net.node(primary.node);
    return pg.#orDestroy(async () => {
      await pg.#as(['pg_basebackup', '-D', pg.data, '-R', '-X', 'stream', '-d', `host=${addr} port=${PORT} user=postgres application_name=${name}`]);
      // the copy carries the primary's settings: later lines win, so its own address and socket
      // follow. Promoted, it has no standby of its own: were it to keep the primary's synchronous
      // standby name, every commit would wait for ever (an orchestrator such as Patroni's
      // synchronous_mode makes this change at promotion)
      pg.#configure(["synchronous_standby_names = ''"], { hba: false });
      await pg.start();
    });
  }

  /** Runs the setup; a server that failed to come up leaves no files behind. */
  async #orDestroy(setup: () => Promise<void>): Promise<NetPostgres> {
    try {
      await setup();
      return this;
    } catch (err) {
      await this.destroy();
      throw err;
    }
  }

  async start(): Promise<void> {
    await this.#as(['pg_ctl', '-D', this.data, '-l', join(this.dir, 'server.log'), '-w', 'start']);
  }

  /**
   * Crashes the server at once: SIGKILL to the postmaster and every backend (all the processes of
   * its namespace, as a machine dying would take them), so no shutdown and no checkpoint.
   */
  crash(): void {
    const pids = execFileSync('ip', ['netns', 'pids', this.net.node(this.node).ns]).toString().split('\n').filter(Boolean);
    for (const pid of pids) {
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {}
    }
  }

  async promote(): Promise<void> {
    await this.#as(['pg_ctl', '-D', this.data, '-w', 'promote']);
  }

  log(): string {
    try {
      return readFileSync(join(this.dir, 'server.log'), 'utf8');
    } catch {
      return '';
    }
  }

  /** Stops the server (whatever is left of it) and removes its files; the namespace goes with the Net. */
  async destroy(): Promise<void> {
    await this.#as(['pg_ctl', '-D', this.data, '-m', 'immediate', '-w', 'stop']).catch(() => {});
    rmSync(this.dir, { recursive: true, force: true });
  }

  #configure(lines: string[], opts: { hba: boolean } = { hba: true }): void {
    const { addr } = this.net.node(this.node);
    appendFileSync(
      join(this.data, 'postgresql.conf'),
      [`listen_addresses = '${addr}'`, `port = ${PORT}`, `unix_socket_directories = '${this.dir}'`, 'max_connections = 200', 'fsync = on', ...lines, ''].join('\n'),
    );
    // trust inside the private range only: every address there is one of this test's namespaces
    if (opts.hba) appendFileSync(join(this.data, 'pg_hba.conf'), 'host all all 198.18.0.0/15 trust\nhost replication all 198.18.0.0/15 trust\n');
  }

  /** Runs a server binary as `postgres` inside the node's namespace (the server inherits both). */
  async #as(argv: string[]): Promise<void> {
    const quoted = [join(PGBIN, argv[0]!), ...argv.slice(1)].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
    // the server inherits pg_ctl's stdout: unless it is redirected, this would never return
    const cmd = `${quoted} >>${join(this.dir, 'ctl.out')} 2>&1`;
    try {
      await run('ip', [...this.net.exec(this.node).slice(1), 'su', 'postgres', '-s', '/bin/bash', '-c', cmd]);
    } catch (err) {
      let out = '';
      try {
        out = readFileSync(join(this.dir, 'ctl.out'), 'utf8');
      } catch {}
      throw new Error(`${argv[0]} failed on ${this.node}: ${(err as Error).message}\n${out}\n${this.log()}`);
    }
  }
}

function privateDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 's8net-pg-'));
  const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres']).toString().trim());
  chownSync(dir, id('-u'), id('-g'));
  return dir;
}
