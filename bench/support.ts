import { spawn } from 'node:child_process';
import { appendFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

/**
 * The smallest owning service: answers every POST with `body` (Default: `{"ok":true}`).
 * `onCall` hears each call's X-Flow-Workflow-Id the moment its headers arrive.
 */
export async function minimalService(body = '{"ok":true}', onCall?: (workflowId: string) => void): Promise<{ url: string; close(): Promise<void> }> {
  const server = createServer((req, res) => {
    onCall?.(String(req.headers['x-flow-workflow-id']));
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(body);
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

const SERVICE_SCRIPT = fileURLToPath(new URL('./service-process.ts', import.meta.url));

/** Starts bench/service-process.ts in a child process; resolves with its URL once it listens. */
export async function serviceProcess(): Promise<{ url: string; close(): Promise<void> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', SERVICE_SCRIPT], { stdio: ['ignore', 'pipe', 'inherit'] });
  process.once('exit', () => child.kill('SIGKILL'));
  const url = await new Promise<string>((resolve, reject) => {
    let buf = '';
    child.stdout!.on('data', (b: Buffer) => {
      buf += b.toString('utf8');
      const nl = buf.indexOf('\n');
      if (nl >= 0) resolve(buf.slice(0, nl).trim());
    });
    child.once('exit', (code) => reject(new Error(`service process exited (${code}) before it listened`)));
  });
  return {
    url,
    close: () =>
      new Promise<void>((r) => {
        if (child.exitCode !== null) return r();
        child.once('exit', () => r());
        child.kill('SIGTERM');
      }),
  };
}

/** What a piece of work cost Postgres: transactions that wrote (took an xid), commits, WAL fsyncs. */
export interface Counts {
  writeTx: number;
  commits: number;
  walSyncs: number;
}

interface Reading {
  xid: number;
  commits: number;
  walSyncs: number;
}

/** One statement, read-only: reading the next xid does not take one. */
const READ = `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xid,
  (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS commits,
  (SELECT wal_sync FROM pg_stat_wal) AS wal_syncs`;
/** Other client connections still open: the work's backends report their stats as they exit. */
const OTHERS = `SELECT count(*)::int AS n FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`;
/** Backends report to the shared statistics lazily, within about a second of going idle. */
const IDLE_REPORT_MS = 1200;

/**
 * Counts what a piece of work cost the database, from a connection of its own. Backends report
 * commits and WAL syncs lazily, so the work closes its connections (a backend reports as it
 * exits) and the count waits for them to be gone. The counter's own queries are counted exactly
 * and subtracted: each is one read-only commit (no xid, no WAL), and before each reading it asks
 * Postgres to report its own statistics at once (pg_stat_force_next_flush, Postgres 15).
 * The server should be the bench's own: autovacuum is counted (it is the workload's cost), other
 * clients would be too.
 */
export class PgCounter {
  /** Statements this connection has sent: each is one commit of its own. */
  #sent = 0;
  private constructor(private readonly client: pg.Client) {}

  static async open(url: string): Promise<PgCounter> {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    return new PgCounter(client);
  }

  /**
   * Runs `work`, which calls `ended()` the moment its measured part is over (the xid is read
   * then) and must then close every connection it opened. Connections open before `measure`
   * should be idle. Returns what the measured part cost, and what `work` returned.
   */
  async measure<T>(work: (ended: () => Promise<void>) => Promise<T>): Promise<Counts & { result: T }> {
    await sleep(IDLE_REPORT_MS); // idle connections opened before report what they did
    const before = await this.#read();
    const sentBefore = this.#sent - 1; // the reading's own commit is reported after it
    let xidEnd: number | null = null;
    const result = await work(async () => {
      xidEnd = (await this.#read()).xid;
    });
    for (let waited = 0; (await this.#query<{ n: number }>(OTHERS)).n > 0; waited += 10) {
      if (waited > 30_000) throw new Error('the measured work left connections open');
      await sleep(10);
    }
    const after = await this.#read();
    const own = this.#sent - 1 - sentBefore; // all but the last reading's own commit
    return {
      result,
      writeTx: (xidEnd ?? after.xid) - before.xid,
      commits: after.commits - before.commits - own,
      walSyncs: after.walSyncs - before.walSyncs,
    };
  }

  async #read(): Promise<Reading> {
    await this.#query('SELECT pg_stat_force_next_flush()');
    const row = await this.#query<{ xid: string; commits: string; wal_syncs: string }>(READ);
    return { xid: Number(row.xid), commits: Number(row.commits), walSyncs: Number(row.wal_syncs) };
  }

  async #query<R extends object>(sql: string): Promise<R> {
    this.#sent++;
    return (await this.client.query(sql)).rows[0] as R;
  }

  async close(): Promise<void> {
    await this.client.end();
  }
}

/** Committed transactions of the database so far (flushed: idle backends report lazily). */
export async function xactCommits(url: string): Promise<number> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await new Promise((r) => setTimeout(r, 1200));
  const res = await c.query<{ n: string }>('SELECT xact_commit AS n FROM pg_stat_database WHERE datname = current_database()');
  await c.end();
  return Number(res.rows[0]!.n);
}

/** Runs `task(i)` for i in [0, total) with at most `concurrency` at a time. */
export async function pool(total: number, concurrency: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) await task(next++);
    }),
  );
}

export function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

/** The median: the middle value, or the mean of the two middle values of an even count. */
export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : sorted.length === 0 ? Number.NaN : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export const fmt = (n: number, digits = 0) =>
  Number.isFinite(n) ? n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : '–';

/** A markdown table with padded columns: readable in a terminal, pasteable into a note. */
export function markdownTable(header: string[], rows: string[][]): string {
  const width = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(width[i]!)).join(' | ')} |`;
  return [line(header), `|${width.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line)].join('\n');
}

/** A goal's verdict as `npm run bench`'s table words it: `≤ 1.2×: met (1.18×)`. */
export const verdict = (label: string, ok: boolean, value: string) => `${label}: ${ok ? 'met' : '**missed**'} (${value})`;

/** One row of `npm run bench`'s table measured by another bench: the table's columns but the counts. */
export interface GoalRow {
  case: string;
  clients: string;
  result: string;
  vs: string;
  goal: string;
}

/**
 * Hands a goal's row to `npm run bench`, which runs this bench as a child process with
 * BENCH_ROWS naming a file (bench/engine.bench.ts): one JSON line per row. Run alone, a bench
 * only prints.
 */
export function reportGoal(row: GoalRow): void {
  const file = process.env['BENCH_ROWS'];
  if (file) appendFileSync(file, `${JSON.stringify(row)}\n`);
}
