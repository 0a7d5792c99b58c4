import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { callHttp } from '../engine/executors/http-call.ts';
import { type Counts, type PgCounter, percentile } from './support.ts';

/** One POST to the owning service with the engine's own HTTP client, as a proxy step makes it. */
export async function post(serviceUrl: string): Promise<void> {
  const r = await callHttp({ method: 'POST', url: `${serviceUrl}/step`, headers: {}, body: {}, timeoutMs: 10_000 });
  if (r.status !== 'succeeded') throw new Error(`bench service answered ${JSON.stringify(r)}`);
}

export interface FloorRun extends Counts {
  /** Operations (one transaction each, with its POST first when there is one) per second. */
  rate: number;
  /** Median time of one operation, ms. */
  p50: number;
}

/**
 * The floor a step cannot beat without batching: `clients` node-postgres clients, each on its own
 * row as each instance is, looping BEGIN; UPDATE the row; INSERT a log row; COMMIT — after one POST
 * to the owning service when `serviceUrl` is given. The same shape as a step's commit (a workflow
 * row and a step row), without anything the engine decides.
 */
export async function floor(url: string, counter: PgCounter, clients: number, total: number, serviceUrl?: string): Promise<FloorRun> {
  const p = new pg.Pool({ connectionString: url, max: clients });
  await p.query('DROP TABLE IF EXISTS bench_raw_t, bench_raw_log');
  await p.query('CREATE TABLE bench_raw_t (id int PRIMARY KEY, state text, ctx jsonb, v bigint)');
  await p.query('CREATE TABLE bench_raw_log (id int, seq int, payload jsonb, PRIMARY KEY (id, seq))');
  await p.query(`INSERT INTO bench_raw_t SELECT g, 'pending', '{}', 0 FROM generate_series(0, ${clients - 1}) g`);
  const conns = await Promise.all(Array.from({ length: clients }, () => p.connect()));
  const lat: number[] = [];
  let seconds = 0;
  const counted = await counter.measure(async (ended) => {
    let next = 0;
    const t0 = performance.now();
    await Promise.all(
      conns.map(async (c, row) => {
        while (next < total) {
          const seq = next++;
          const s = performance.now();
          if (serviceUrl !== undefined) await post(serviceUrl);
          await c.query('BEGIN');
          await c.query('UPDATE bench_raw_t SET state = $2, ctx = $3, v = v + 1 WHERE id = $1', [row, 'processing', JSON.stringify({ seq })]);
          await c.query('INSERT INTO bench_raw_log VALUES ($1, $2, $3)', [row, seq, JSON.stringify({ out: 'ok' })]);
          await c.query('COMMIT');
          lat.push(performance.now() - s);
        }
      }),
    );
    seconds = (performance.now() - t0) / 1000;
    await ended();
    for (const c of conns) c.release();
    await p.end();
  });
  const cleanup = new pg.Client({ connectionString: url });
  await cleanup.connect();
  await cleanup.query('DROP TABLE bench_raw_t, bench_raw_log');
  await cleanup.end();
  return {
    rate: total / seconds,
    p50: percentile(lat.sort((a, b) => a - b), 50),
    writeTx: counted.writeTx / total,
    commits: counted.commits / total,
    walSyncs: counted.walSyncs / total,
  };
}

/** The HTTP call alone, one at a time: its median latency in ms. */
export async function httpAlone(serviceUrl: string, calls: number): Promise<number> {
  for (let i = 0; i < 50; i++) await post(serviceUrl);
  const lat: number[] = [];
  for (let i = 0; i < calls; i++) {
    const s = performance.now();
    await post(serviceUrl);
    lat.push(performance.now() - s);
  }
  return percentile(lat.sort((a, b) => a - b), 50);
}
