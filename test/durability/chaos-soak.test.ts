import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { cpus, totalmem } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FlowError, TERMINAL_STATES } from '../../contracts/index.ts';
import { artifactModules } from '../../engine/runtime/artifacts.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { type Db, openDb } from '../../engine/store/db.ts';
import { migrate } from '../../engine/store/migrate.ts';
import { buildTestModules, type BuiltTestModules } from '../host-functions/helpers/test-modules.ts';
import { OPERATOR } from '../support/engine.ts';
import { LedgerService } from '../support/ledger-service.ts';
import { PgCluster } from '../support/pg-cluster.ts';
import { type Mode, committedAndClosed, soakLogics, soakOperations, storeViolations, succeededAttempts } from '../support/soak-workload.ts';
import { attemptViolations, retrying, waitFor } from '../support/store-checks.ts';
import { killAll, WorkerProcess } from '../support/worker-process.ts';

/**
 * The chaos soak: a mixed workload (proxy, http, func, decisions, delays, children, loops) runs on
 * worker processes for FLOW_SOAK_MINUTES while faults land at random — kill -9 of a worker,
 * pg_terminate_backend of the workers' connections, a Postgres crash-restart, a worker SIGSTOPped
 * past its lease, operator verbs and approvals racing the workers — and then every invariant is
 * checked: no committed step re-runs, each key is applied at most once per visit, every instance
 * ends or waits for a stated reason, compensations run in exact reverse, audit rows equal the
 * verbs that succeeded. `npm test` runs 2 minutes; `npm run soak` runs 15 and writes
 * RELIABILITY.md (FLOW_SOAK_REPORT). The server is a private one (PgCluster), since it is restarted.
 */
const MINUTES = Number(process.env['FLOW_SOAK_MINUTES'] ?? 2);
const REPORT = process.env['FLOW_SOAK_REPORT'];
const ENV = 'soak';
const SLOTS = 3;
const LEASE_MS = 1500;
const MAX_OPEN = 30;
const APP = 's8flow-soak-worker';
type Fault = 'kill9' | 'terminate' | 'pg_restart' | 'sigstop';
const FAULTS: Fault[] = ['kill9', 'terminate', 'pg_restart', 'sigstop'];

describe.skipIf(!process.env['DATABASE_URL'] || !PgCluster.available())(
  'chaos soak (needs a Postgres server it may restart: skipped on PGlite, which is one in-process session)',
  () => {
    let cluster: PgCluster;
    let db: Db;
    let svc: LedgerService;
    let engine: Engine;
    let built: BuiltTestModules;
    const workers = new Map<number, WorkerProcess>();
    const prefixes = new Map<number, string>();
    const everyWorker: WorkerProcess[] = [];
    let incarnation = 0;

    beforeAll(async () => {
      cluster = await PgCluster.create();
      db = await openDb(cluster.url, { schema: `flow_soak_${randomBytes(6).toString('hex')}`, poolSize: 6 });
      await migrate(db);
      built = await buildTestModules(['one-call']);
      svc = await new LedgerService({
        operations: soakOperations(),
        latencyMs: () => 2 + Math.floor(Math.random() * 20),
        committed: (info) => retrying(() => committedAndClosed(db, info), 60_000),
      }).listen();
      engine = new Engine({ db, env: ENV });
    }, 180_000);

    afterAll(async () => {
      await killAll(everyWorker);
      await svc?.close();
      await db?.close();
      await cluster?.destroy();
      await built?.cleanup();
    });

    async function spawnSlot(slot: number): Promise<void> {
      const w = await WorkerProcess.start({
        databaseUrl: cluster.url,
        schema: db.schema,
        env: ENV,
        handlerUrl: svc.mount(prefixes.set(slot, `/w${slot}.${incarnation++}`).get(slot)!),
        concurrency: 8,
        leaseMs: LEASE_MS,
        pollMs: 100,
        args: ['--artifacts', built.dir],
        extraEnv: { PGAPPNAME: APP, FLOW_HTTP_ALLOWLIST: '*' },
        readyTimeoutMs: 120_000,
      });
      everyWorker.push(w);
      workers.set(slot, w);
    }

    it(`holds every invariant through ${MINUTES} minutes of faults`, async () => {
      const started = Date.now();
      const until = started + MINUTES * 60_000;
      const logics = soakLogics(built.hash['one-call']!, svc.mount('/http'));
      for (const l of [logics.item, logics.pay, logics.loop, logics.fan]) await engine.publishVersion(ENV, l, await artifactModules(built.dir, l));
      const compensable = new Set<string>();
      for (const l of Object.values(logics)) for (const [name, s] of Object.entries(l.steps)) if (s.compensate) compensable.add(`${l.logicId}:${name}`);
      for (let slot = 0; slot < SLOTS; slot++) await spawnSlot(slot);

      const faults: Record<Fault, number> = { kill9: 0, terminate: 0, pg_restart: 0, sigstop: 0 };
      // a verb cut off by a fault has an unknown outcome: its commit may have landed unacknowledged
      const verbs = { resume: 0, cancel: 0, retry: 0, refused: 0, unknown: 0 };
      const failed = (err: unknown) => {
        if (err instanceof FlowError) verbs.refused++;
        else verbs.unknown++;
      };
      /** Worker prefixes that were SIGSTOPped at some point: their in-flight calls may land late. */
      const paused = new Set<string>();
      /** When each SIGSTOPped worker was let go again. */
      const resumedAt: number[] = [];
      let n = 0;
      let running = true;

      // faults, one every 3–8 s, kinds in rotation
      const chaos = (async () => {
        while (running) {
          await sleep(3000 + Math.floor(Math.random() * 5000));
          if (!running) break;
          const kind = FAULTS[Object.values(faults).reduce((a, b) => a + b, 0) % FAULTS.length]!;
          const up = [...workers].filter(([, w]) => w.alive);
          if (kind === 'kill9' && up.length > 0) {
            const [slot, w] = up[Math.floor(Math.random() * up.length)]!;
            await w.kill();
            await sleep(Math.floor(Math.random() * 1000));
            await spawnSlot(slot);
          } else if (kind === 'terminate') {
            await retrying(() => db.pool.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [APP]));
          } else if (kind === 'pg_restart') {
            await cluster.restartImmediate();
          } else if (kind === 'sigstop' && up.length > 0) {
            const [slot, w] = up[Math.floor(Math.random() * up.length)]!;
            paused.add(prefixes.get(slot)!);
            w.signal('SIGSTOP');
            await sleep(LEASE_MS + 1000);
            w.signal('SIGCONT');
            resumedAt.push(Date.now());
          }
          faults[kind]++;
        }
      })();

      // operators: approvals and verbs racing the workers
      async function operate(final: boolean): Promise<void> {
        const waiting = await retrying(() =>
          db.pool.query<{ id: string }>(`SELECT id FROM workflows WHERE state = 'waiting' AND current_step = 'approve' LIMIT 10`),
        );
        for (const { id } of waiting.rows) {
          const option = final || Math.random() < 0.7 ? 'go' : 'stop';
          await engine.resume(id, { step: 'approve', option, approver: { subject: 'soak', scopes: ['flow:decide'] } }).then(
            () => verbs.resume++,
            failed,
          );
        }
        if (final || Math.random() > 0.05) return;
        const pick = await retrying(() =>
          db.pool.query<{ id: string; state: string }>(
            `SELECT id, state FROM workflows WHERE parent_id IS NULL AND state NOT IN ('completed', 'failed', 'compensated', 'cancelled')
             ORDER BY random() LIMIT 1`,
          ),
        );
        const target = pick.rows[0];
        if (target === undefined) return;
        const o = { ...OPERATOR, env: ENV, reason: 'soak' };
        if (target.state === 'dead_lettered') {
          await engine.ops.retry(target.id, o).then(
            () => verbs.retry++,
            failed,
          );
        } else {
          await engine.ops.cancel(target.id, { reason: 'soak', compensate: Math.random() < 0.5 }, o).then(
            () => verbs.cancel++,
            failed,
          );
        }
      }

      const modes: Mode[] = ['ok', 'ok', 'decline', 'approve', 'flaky'];
      while (Date.now() < until) {
        const open = await retrying(() =>
          db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM workflows WHERE state NOT IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered')`),
        );
        if (open.rows[0]!.n < MAX_OPEN) {
          const which = n % 5;
          const mode = modes[Math.floor(n / 5) % modes.length]!;
          const logic = which === 3 ? logics.loop : which === 4 ? logics.fan : logics.pay;
          const input = which === 4 ? { n, mode, items: [n, n + 1, n + 2].slice(0, 1 + (n % 3)) } : { n, mode };
          const key = `soak-${n}`;
          await retrying(() => engine.start({ logicId: logic.logicId, input, env: ENV, idempotencyKey: key }));
          n++;
        }
        await operate(false).catch(() => {});
        await sleep(100);
      }
      running = false;
      await chaos;
      for (let slot = 0; slot < SLOTS; slot++) if (!workers.get(slot)!.alive) await spawnSlot(slot);

      // drain: answer every decision left until nothing runs
      const drainedAt = Date.now();
      await waitFor(
        'every instance to end or wait for a reason',
        async () => {
          await operate(true).catch(() => {});
          const busy = await retrying(() =>
            db.pool.query<{ n: number }>(
              `SELECT count(*)::int AS n FROM workflows WHERE state NOT IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered')`,
            ),
          );
          return busy.rows[0]!.n === 0 ? true : undefined;
        },
        { timeoutMs: 180_000, intervalMs: 500 },
      ).catch(() => false);

      const violations: string[] = [];
      // A call for a committed key is a committed step run again — unless it is the late arrival
      // of a call a SIGSTOPped worker had begun before it lost its lease, which the service's
      // ledger answered from its record (no second effect): counted, not excused, when applied.
      // The service asks the store, as each call arrives, whether the key's success is committed;
      // during a Postgres restart that question waits, and the answer describes a later moment.
      // So a call is a re-run only if it arrived after the success was written (finished_at, the
      // same machine's clock) — a call held up behind the restart was in flight before it.
      // An `http` step's URL is the definition's, the same for every worker, so its sender is not
      // in the path: a late call answered from the ledger counts as a paused worker's only when it
      // arrived within 5 s of a worker being let go (SIGCONT), with an attempt no later than the one
      // that succeeded. Both are counted apart in the report, never hidden.
      const succeeded = await succeededAttempts(db);
      let lateFromPaused = 0;
      let lateHttpAfterResume = 0;
      let heldBehindRestart = 0;
      for (const d of svc.ledger.deliveries.filter((x) => x.afterCommit)) {
        const success = succeeded.get(`${d.kind}|${d.key.replace(/:call:\d+$/, '')}`);
        const prepared = success !== undefined && d.attempt <= success.attempt;
        const afterResume = d.at !== undefined && resumedAt.some((t) => d.at! >= t && d.at! - t < 5000);
        if (d.outcome === 'replayed' && paused.has(d.via)) lateFromPaused++;
        else if (d.outcome === 'replayed' && d.at !== undefined && success !== undefined && d.at < success.atMs) heldBehindRestart++;
        else if (d.outcome === 'replayed' && d.via === '/http' && prepared && afterResume) lateHttpAfterResume++;
        else violations.push(`committed step ran again: ${d.key}#${d.attempt} (${d.op} via ${d.via}, ${d.outcome})`);
      }
      violations.push(...(await storeViolations(db, svc.ledger, compensable)));
      violations.push(...(await attemptViolations(db)));
      // rows about instances: publishes write audit rows of their own, on the version
      const audit = (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM audit WHERE workflow_id IS NOT NULL')).rows[0]!.n;
      const succeededVerbs = verbs.resume + verbs.cancel + verbs.retry;
      if (audit < succeededVerbs || audit > succeededVerbs + verbs.unknown) {
        violations.push(`${audit} audit rows for ${succeededVerbs} verbs that succeeded (and ${verbs.unknown} cut off by a fault)`);
      }

      const states = (
        await db.pool.query<{ logic_id: string; state: string; n: number }>(
          'SELECT logic_id, state, count(*)::int AS n FROM workflows GROUP BY 1, 2 ORDER BY 1, 2',
        )
      ).rows;
      const total = states.reduce((a, r) => a + r.n, 0);
      const version = (await db.pool.query<{ v: string }>("SELECT current_setting('server_version') AS v")).rows[0]!.v;
      const { ledger } = svc;
      const figures = {
        minutes: MINUTES,
        durationS: Math.round((Date.now() - started) / 1000),
        drainS: Math.round((Date.now() - drainedAt) / 1000),
        instances: total,
        started: n,
        faults,
        verbs,
        deliveries: ledger.deliveries.length,
        applied: ledger.count('applied'),
        replayed: ledger.count('replayed'),
        transient: ledger.count('transient'),
        refused: ledger.count('refused'),
        workerProcesses: everyWorker.length,
        lateFromPaused,
        lateHttpAfterResume,
        heldBehindRestart,
        violations: violations.length,
      };
      console.log(`chaos soak: ${JSON.stringify(figures)}\n${violations.slice(0, 20).join('\n')}`);
      if (REPORT !== undefined) await writeFile(REPORT, reliability(figures, states, violations, version));

      expect(violations).toEqual([]);
      expect(n).toBeGreaterThan(0);
      for (const f of FAULTS) expect(faults[f], `faults of kind ${f}`).toBeGreaterThan(0);
      expect(TERMINAL_STATES.size).toBeGreaterThan(0);
    }, (MINUTES * 60 + 420) * 1000);
  },
);

function reliability(
  f: { minutes: number; durationS: number; drainS: number; instances: number; faults: Record<Fault, number>; verbs: Record<string, number> } & Record<string, unknown>,
  states: { logic_id: string; state: string; n: number }[],
  violations: string[],
  version: string,
): string {
  const rows = states.map((s) => `| ${s.logic_id} | ${s.state} | ${s.n} |`).join('\n');
  return `# Reliability

Figures from one run of the chaos soak (\`npm run soak\`, test/durability/chaos-soak.test.ts) on
${new Date().toISOString().slice(0, 10)}, engine at commit ${commit()}: Postgres ${version}, ${cpus().length} cores and
${Math.round(totalmem() / 2 ** 30)} GiB shared with other work running at the same time, so the
counts per minute are noisy; the violations are not.

| figure | value |
|---|---|
| workload duration | ${f.minutes} min (${f.durationS} s with the drain of ${f.drainS} s) |
| instances (children included) | ${f.instances} |
| worker processes started (3 slots, restarts included) | ${f['workerProcesses']} |
| worker \`kill -9\` | ${f.faults.kill9} |
| \`pg_terminate_backend\` of every worker connection | ${f.faults.terminate} |
| Postgres crash-restarts (\`pg_ctl restart -m immediate\`) | ${f.faults.pg_restart} |
| worker SIGSTOPped past its lease (${LEASE_MS} ms + 1 s) | ${f.faults.sigstop} |
| approvals / cancels / retries that succeeded (refused; cut off by a fault, outcome unknown) | ${f.verbs['resume']} / ${f.verbs['cancel']} / ${f.verbs['retry']} (${f.verbs['refused']}; ${f.verbs['unknown']}) |
| calls delivered (applied, replayed from the ledger, transient, refused) | ${f['deliveries']} (${f['applied']}, ${f['replayed']}, ${f['transient']}, ${f['refused']}) |
| calls for a committed key that arrived late from a worker SIGSTOPped mid-call, answered from the ledger (no second effect) | ${f['lateFromPaused']} |
| \`http\` step calls (no sender in the path) for a committed key, arriving within 5 s of a SIGCONT with an attempt prepared before the commit, answered from the ledger | ${f['lateHttpAfterResume']} |
| calls that arrived before their key's success was written, whose "committed yet?" probe waited out a Postgres restart, answered from the ledger | ${f['heldBehindRestart']} |
| **invariant violations** | **${violations.length}** |

Invariants checked after the run: no call arrived for a key whose success was committed and
closed (no committed step re-ran); each key, as sent, applied at most once and succeeded on one
visit; every attempt committed once; no attempt left running in an ended instance; every
instance ended or waits for a stated reason; compensations ran in the exact reverse of the
registrations the path made; audit rows equal the verbs that succeeded (a verb cut off by a
fault may or may not have landed: it may add a row).

| workflow | final state | instances |
|---|---|---|
${rows}
${violations.length === 0 ? '' : `\nViolations:\n\n${violations.map((v) => `- ${v}`).join('\n')}\n`}`;
}

/** The commit the soak ran on, marked when the work tree had changes. */
function commit(): string {
  try {
    const head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8' }).trim() !== '';
    return dirty ? `${head} (with uncommitted changes)` : head;
  } catch {
    return '(unknown: not a git checkout)';
  }
}
