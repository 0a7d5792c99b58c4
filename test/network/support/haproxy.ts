import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Net } from './netns.ts';

const PGBIN = process.env['FLOW_TEST_PGBIN'] ?? '/usr/lib/postgresql/15/bin';

/** Why HAProxy cannot run here, or null. */
export function haproxyUnavailable(): string | null {
  try {
    execFileSync('haproxy', ['-v'], { stdio: 'pipe' });
    return null;
  } catch {
    return "haproxy not installed (Debian's haproxy package)";
  }
}

/**
 * HAProxy in a node's namespace as the one Postgres endpoint that moves: it sends every new
 * connection to whichever server answers `pg_is_in_recovery() = false` (an external check every
 * 250 ms), and cuts the sessions of a server it marks down. It listens on the node's address for
 * the engines and on a unix socket (`localUrl`) for the test.
 */
export class PgEndpoint {
  private constructor(
    readonly child: ChildProcess,
    readonly net: Net,
    readonly node: string,
    readonly dir: string,
  ) {}

  static async start(net: Net, node: string, servers: { name: string; addr: string }[], dir: string): Promise<PgEndpoint> {
    const check = join(dir, 'is-primary.sh');
    // $3 and $4: the server's address and port (HAProxy's external-check arguments)
    writeFileSync(check, `#!/bin/sh\n[ "$(PGCONNECT_TIMEOUT=2 ${PGBIN}/psql -h "$3" -p "$4" -U postgres -d postgres -XtAc 'SELECT pg_is_in_recovery()')" = f ]\n`);
    chmodSync(check, 0o755);
    const cfg = join(dir, 'haproxy.cfg');
    const { addr } = net.node(node);
    writeFileSync(
      cfg,
      [
        'global',
        '  external-check',
        '  insecure-fork-wanted',
        '  maxconn 2000',
        'defaults',
        '  mode tcp',
        '  timeout connect 1s',
        '  timeout client 1h',
        '  timeout server 1h',
        '  timeout check 3s',
        'listen postgres',
        `  bind ${addr}:5432`,
        `  bind unix@${join(dir, '.s.PGSQL.5432')} mode 777`,
        '  option external-check',
        `  external-check command ${check}`,
        '  default-server inter 250ms fall 3 rise 1 on-marked-down shutdown-sessions',
        ...servers.map((s) => `  server ${s.name} ${s.addr}:5432 check`),
        '',
      ].join('\n'),
    );
    const [cmd, ...pre] = net.exec(node);
    const child = spawn(cmd!, [...pre, 'haproxy', '-db', '-f', cfg], { stdio: ['ignore', 'pipe', 'pipe'] });
    const p = new PgEndpoint(child, net, node, dir);
    await sleep(300);
    if (child.exitCode !== null) throw new Error(`haproxy exited ${child.exitCode}`);
    return p;
  }

  get url(): string {
    return `postgres://postgres@${this.net.node(this.node).addr}:5432/postgres`;
  }

  get localUrl(): string {
    return `postgres://postgres@/postgres?host=${encodeURIComponent(this.dir)}&port=5432`;
  }

  async kill(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    this.child.kill('SIGKILL');
    await exited;
  }
}
