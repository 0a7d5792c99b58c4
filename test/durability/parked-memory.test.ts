import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import type { Db } from '../../engine/store/db.ts';
import { cloneInstances } from '../support/bulk-instances.ts';
import { closeTestDb, openTestDb } from '../support/db.ts';
import { uniqueLogic } from '../support/engine.ts';
import { func, TEST_MODULE_BYTES, TEST_MODULES } from '../support/ledger-executor.ts';
import { waitFor } from '../support/store-checks.ts';

/**
 * Parked instances cost the engine nothing (ARCHITECTURE.md, Invariants: time and parking). An
 * engine process polls while the parked population grows — 10,000, then 100,000 (and 1,000,000 in
 * `npm run soak:parked`) — and at each size, once the instances due within the run have fired and
 * finished, its resident memory is sampled after a full GC. The slope between sizes, in bytes per
 * parked instance, must be about nothing: a handle kept per instance would be hundreds of bytes.
 */
const DATABASE_URL = process.env['DATABASE_URL'];
const SIZES = (process.env['FLOW_PARKED_COUNTS'] ?? '10000,100000').split(',').map(Number);
const ENV = 'parked';
const MIB = 1024 * 1024;
/** One in a hundred of the instances added at each size is a delay that falls due during the run. */
const DUE_EVERY = 100;
/** The bar: well under one small object per parked instance; RSS noise of a few MiB over 90,000 instances is ~50 B. */
const MAX_SLOPE_BYTES = 256;
const PROBE = fileURLToPath(new URL('../support/memory-probe-worker.ts', import.meta.url));

const probes = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of probes) c.kill('SIGKILL');
});

interface Sample {
  phase: string;
  rss: number;
  heapUsed: number;
  checkouts: number;
}

describe.skipIf(!DATABASE_URL)('engine memory against the number of parked instances', () => {
  let db: Db;
  let engine: Engine;
  let child: ChildProcess | null = null;
  let exited: Promise<void> = Promise.resolve();
  const lines: string[] = [];
  const asked: ((s: Sample) => void)[] = [];

  beforeAll(async () => {
    db = await openTestDb('postgres', { poolSize: 4 });
    engine = new Engine({ db, env: ENV });
  });
  afterAll(async () => {
    if (child !== null && child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child?.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    }
    await engine?.close().catch(() => {});
    if (db) await closeTestDb(db);
  });

  async function sample(): Promise<Sample> {
    const next = new Promise<Sample>((r) => asked.push(r));
    child!.kill('SIGUSR2');
    return next;
  }

  const count = async (where: string) => (await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM workflows WHERE ${where}`)).rows[0]!.n;

  /** Adds `n` parked instances: most wait on a week-long decision, one in DUE_EVERY on a delay due in seconds. */
  async function park(parked: LogicVersion, due: LogicVersion, n: number): Promise<number> {
    const dueN = Math.ceil(n / DUE_EVERY);
    const start = async (l: LogicVersion) => (await engine.start({ logicId: l.logicId, input: {}, env: ENV })).id;
    await cloneInstances(db, [await start(parked)], n - dueN - 1);
    await cloneInstances(db, [await start(due)], dueN - 1);
    return dueN;
  }

  it(`the engine's RSS does not grow with the number parked (${SIZES.join(', ')})`, async () => {
    const parked = uniqueLogic({ start: 'approve', steps: { approve: { kind: 'decision', options: ['go'], deadline: 'P7D' } } });
    // a delay is copied with its absolute due time, so each batch's delays fall due a few seconds after it is parked
    const due = uniqueLogic({ modules: TEST_MODULES, start: 'nap', steps: { nap: { kind: 'delay', duration: 'PT4S', next: 'after' }, after: func('after') } });
    await engine.publish(parked, ENV);
    await engine.publishVersion(ENV, due, TEST_MODULE_BYTES);

    child = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', PROBE], {
      env: { ...process.env, DATABASE_URL, FLOW_SCHEMA: db.schema, FLOW_ENV: ENV, PROBE_WARMUP_MS: '2000', PROBE_MEASURE_MS: '2000' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const proc = child;
    probes.add(proc);
    exited = new Promise((r) =>
      proc.once('exit', () => {
        probes.delete(proc);
        r();
      }),
    );
    proc.stderr?.on('data', (b: Buffer) => lines.push(b.toString('utf8')));
    let started!: () => void;
    const ready = new Promise<void>((r) => {
      started = r;
    });
    proc.stdout?.on('data', (b: Buffer) => {
      for (const line of b.toString('utf8').split('\n')) {
        if (!line.startsWith('{')) continue;
        const s = JSON.parse(line) as Sample;
        if (s.phase === 'measured') started();
        if (s.phase === 'asked') asked.shift()?.(s);
      }
    });
    await Promise.race([ready, exited.then(() => Promise.reject(new Error(`the probe exited early:\n${lines.join('')}`)))]);

    const points: { parked: number; rss: number; heap: number }[] = [];
    let dueTotal = 0;
    for (const size of SIZES) {
      const have = await count("state = 'waiting'");
      dueTotal += await park(parked, due, size - have);
      // the due ones fire, run their func step on the probe's workers and finish
      await waitFor('the due instances to finish', async () => ((await count("state = 'completed'")) === dueTotal ? true : undefined), {
        timeoutMs: 120_000,
        intervalMs: 250,
      });
      const before = (await sample()).checkouts;
      // let a few poll cycles pass over the grown tables before measuring
      await new Promise((r) => setTimeout(r, 1500));
      const s = await sample();
      expect(s.checkouts).toBeGreaterThan(before);
      points.push({ parked: await count("state = 'waiting'"), rss: s.rss, heap: s.heapUsed });
    }

    const mib = (n: number) => (n / MIB).toFixed(1);
    const slopes = points.slice(1).map((p, i) => (p.rss - points[i]!.rss) / (p.parked - points[i]!.parked));
    const heapSlopes = points.slice(1).map((p, i) => (p.heap - points[i]!.heap) / (p.parked - points[i]!.parked));
    console.log(
      `parked memory: ${points.map((p) => `${p.parked} parked → RSS ${mib(p.rss)} MiB, heap ${mib(p.heap)} MiB`).join('; ')}; ` +
        `${dueTotal} fell due and finished during the run; slope ${slopes.map((b) => `${b.toFixed(1)}`).join(', ')} B/instance (RSS), ` +
        `${heapSlopes.map((b) => `${b.toFixed(1)}`).join(', ')} B/instance (heap); stderr: ${lines.join(' ').trim() || 'none'}`,
    );
    for (const slope of [...slopes, ...heapSlopes]) expect(slope).toBeLessThan(MAX_SLOPE_BYTES);
  }, 900_000);
});
