import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import type { Db } from '../../engine/store/db.ts';
import { cloneInstances } from '../support/bulk-instances.ts';
import { closeTestDb, openTestDb } from '../support/db.ts';
import { uniqueLogic } from '../support/engine.ts';
import { func, TEST_MODULE_BYTES, TEST_MODULES } from '../support/ledger-executor.ts';
import { stateCounts, waitFor } from '../support/store-checks.ts';

/**
 * Parking costs nothing in memory (ARCHITECTURE.md, Invariants: time and parking; core/park.ts): a waiting instance is a row, not
 * a promise. 100,000 instances wait on a decision (each with its deadline timer pending) while an
 * engine process polls; its resident memory stays flat, and the instances are live: a few are
 * resumed at the end and that same process runs them on.
 */
const DATABASE_URL = process.env['DATABASE_URL'];
const WAITING = 100_000;
const ENV = 'waiting';
const MIB = 1024 * 1024;
/** Generous: a leak per waiting instance, or per poll cycle, would show as far more. */
const MAX_GROWTH = 64 * MIB;
const PROBE = fileURLToPath(new URL('../support/memory-probe-worker.ts', import.meta.url));
const APPROVER = { subject: 'ops@example.com', scopes: ['flow:decide'] };

/** The probe process never outlives this one, however the test ends. */
const probes = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of probes) c.kill('SIGKILL');
});

interface Sample {
  phase: string;
  rss: number;
  heapUsed: number;
  checkouts: number;
  at: number;
}

describe.skipIf(!DATABASE_URL)('100,000 waiting instances', () => {
  let db: Db;
  let engine: Engine;
  let child: ChildProcess | null = null;
  let childExited: Promise<void> = Promise.resolve();
  const lines: string[] = [];

  beforeAll(async () => {
    db = await openTestDb('postgres', { poolSize: 4 });
    engine = new Engine({ db, env: ENV });
  });

  afterAll(async () => {
    if (child !== null && child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child?.kill('SIGKILL'), 10_000);
      await childExited;
      clearTimeout(timer);
    }
    await engine?.close().catch(() => {});
    if (db) await closeTestDb(db);
  });

  it('leave an engine process polling beside them flat in memory, and stay live', async () => {
    const logic = uniqueLogic({
      modules: TEST_MODULES,
      start: 'approve',
      steps: {
        approve: { kind: 'decision', options: ['go'], deadline: 'P7D', next: 'after' },
        after: func('after'),
      },
    });
    await engine.publishVersion(ENV, logic, TEST_MODULE_BYTES);
    const templates: string[] = [];
    for (let i = 0; i < 10; i++) templates.push((await engine.start({ logicId: logic.logicId, input: { i }, env: ENV })).id);
    const clones = await cloneInstances(db, templates, WAITING - templates.length);
    expect(await stateCounts(db)).toEqual({ waiting: WAITING });
    const pendingTimers = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM timers');
    expect(pendingTimers.rows[0]!.n).toBe(WAITING);

    // the engine process under measurement: its own RSS, default poll interval
    const samples: Sample[] = [];
    let ready!: () => void;
    const measured = new Promise<void>((r) => {
      ready = r;
    });
    child = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', PROBE], {
      env: {
        ...process.env,
        DATABASE_URL,
        FLOW_SCHEMA: db.schema,
        FLOW_ENV: ENV,
        PROBE_WARMUP_MS: '3000',
        PROBE_MEASURE_MS: '10000',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const proc = child;
    probes.add(proc);
    childExited = new Promise((r) =>
      proc.once('exit', () => {
        probes.delete(proc);
        r();
      }),
    );
    proc.stderr?.on('data', (b: Buffer) => lines.push(b.toString('utf8')));
    proc.stdout?.on('data', (b: Buffer) => {
      for (const line of b.toString('utf8').split('\n')) {
        if (!line.startsWith('{')) continue;
        lines.push(line);
        const s = JSON.parse(line) as Sample;
        if (s.phase === 'warm' || s.phase === 'sample' || s.phase === 'measured') samples.push(s);
        if (s.phase === 'measured') ready();
      }
    });
    await Promise.race([
      measured,
      childExited.then(() => {
        throw new Error(`the probe process exited early:\n${lines.join('\n')}`);
      }),
      new Promise((_, reject) => setTimeout(() => reject(new Error(`no measurement after 60 s:\n${lines.join('\n')}`)), 60_000)),
    ]);

    const warm = samples[0]!;
    const last = samples.at(-1)!;
    const growth = last.rss - warm.rss;
    const mib = (n: number) => (n / MIB).toFixed(1);
    console.log(
      `waiting memory: ${WAITING} waiting instances, ${pendingTimers.rows[0]!.n} pending timers; engine process RSS ` +
        samples.map((s) => `${s.phase} ${mib(s.rss)}`).join(' → ') +
        ` MiB (growth ${mib(growth)} MiB over ${((last.at - warm.at) / 1000).toFixed(1)} s, ${last.checkouts - warm.checkouts} connection checkouts ` +
        `by its timer, claim and outbox polls); heapUsed ${mib(warm.heapUsed)} → ${mib(last.heapUsed)} MiB; stderr: ${lines.filter((l) => !l.startsWith('{')).join(' ') || 'none'}`,
    );
    // it polled all along (each cycle checks out connections) and nothing it read stayed behind
    expect(last.checkouts).toBeGreaterThan(warm.checkouts);
    expect(growth).toBeLessThan(MAX_GROWTH);
    expect(last.heapUsed - warm.heapUsed).toBeLessThan(MAX_GROWTH);

    // live: answer a few (templates and clones alike); the probe process runs them to the end
    const resumed = [templates[0]!, templates[9]!, clones[0]!, clones[50_000]!, clones.at(-1)!];
    for (const id of resumed) await engine.resume(id, { step: 'approve', option: 'go', approver: APPROVER }, { env: ENV });
    const done = await waitFor(
      'the resumed instances to complete',
      async () => {
        const res = await db.pool.query<{ id: string; state: string; output: unknown }>(
          `SELECT id, state, output FROM workflows WHERE id = ANY($1::uuid[])`,
          [resumed],
        );
        return res.rows.every((r) => r.state === 'completed') ? res.rows : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    expect(done.map((r) => r.output)).toEqual(resumed.map(() => ({ ran: true })));
    expect(await stateCounts(db)).toEqual({ completed: resumed.length, waiting: WAITING - resumed.length });
    // the answered ones ended: their deadline timers are gone; the others still wait on theirs
    const timers = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM timers');
    expect(timers.rows[0]!.n).toBe(WAITING - resumed.length);
  }, 120_000);
});
