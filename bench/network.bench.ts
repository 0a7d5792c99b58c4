import type { LogicVersion } from '../contracts/index.ts';
import { Engine } from '../engine/runtime/engine.ts';
import { openDb } from '../engine/store/db.ts';
import { migrate } from '../engine/store/migrate.ts';
import { makeLogic } from '../test/contracts/helpers.ts';
import { waitUntilAtRest } from '../test/support/store-checks.ts';
import type { WorkerProcess } from '../test/support/worker-process.ts';
import { NetService, Relay, scratchDir, startNode } from '../test/network/support/cluster.ts';
import { NetPostgres, postgresUnavailable } from '../test/network/support/net-postgres.ts';
import { Net } from '../test/network/support/netns.ts';

/**
 * Steps/s with Postgres 0, 5 and 50 ms of round trip away (as root: `tsx bench/network.bench.ts`).
 * The network of test/network: two engine nodes, the service and Postgres each in a namespace of
 * their own, the delay added by the relay in front of Postgres. The service answers at once and
 * asks the store nothing, so the rows measure the engine's round trips alone. Batched commits
 * should make throughput fall far less than the round trip grows.
 */
const WORKFLOWS = Number(process.env['FLOW_NET_BENCH_WORKFLOWS'] ?? 300);
const STEPS = 5;
const CONCURRENCY = Number(process.env['FLOW_NET_BENCH_CONCURRENCY'] ?? 32);
const ENV = 'bench';

const why = Net.unavailable() ?? postgresUnavailable();
if (why !== null) {
  process.stderr.write(`network bench skipped: ${why}\n`);
  process.exit(0);
}
const scratch = scratchDir();
const net = await Net.create(['pg', 'wan', 'e1', 'e2', 'svc']);
const nodes: WorkerProcess[] = [];
let pg: NetPostgres | undefined;
try {
  pg = await NetPostgres.primary(net, 'pg');
  const relay = await Relay.start(net, 'wan', 'pg', scratch.dir);
  const svc = await NetService.start(net, 'svc', scratch.dir);
  const db = await openDb(pg.localUrl, { schema: 'flow', poolSize: 8 });
  await migrate(db);
  const engine = new Engine({ db, env: ENV });
  const steps: LogicVersion['steps'] = {};
  for (let i = 0; i < STEPS; i++) steps[`s${i}`] = { kind: 'proxy', handler: 'test', path: '/step', ...(i + 1 < STEPS ? { next: `s${i + 1}` } : {}) };
  const logic = makeLogic({ logicId: 'bench.network', start: 's0', steps });
  await engine.publish(logic, ENV);
  const databaseUrl = `postgres://postgres@${net.node('wan').addr}:5432/postgres`;
  for (const name of ['e1', 'e2']) nodes.push(await startNode(net, name, { databaseUrl, service: svc, env: ENV, concurrency: CONCURRENCY }));

  // untimed: connections, JIT and caches warm before the first row
  await Promise.all(Array.from({ length: 50 }, (_, n) => engine.start({ logicId: logic.logicId, input: { n: -n }, env: ENV })));
  await waitUntilAtRest(db, { timeoutMs: 300_000 });
  const rows: { rtt: number; perSec: number }[] = [];
  for (const rtt of [0, 5, 50]) {
    await relay.setRttMs(rtt);
    const began = performance.now();
    for (let n = 0; n < WORKFLOWS; n += 50) {
      await Promise.all(Array.from({ length: Math.min(50, WORKFLOWS - n) }, (_, i) => engine.start({ logicId: logic.logicId, input: { n: n + i }, env: ENV })));
    }
    await waitUntilAtRest(db, { timeoutMs: 300_000 });
    rows.push({ rtt, perSec: (WORKFLOWS * STEPS) / ((performance.now() - began) / 1000) });
  }
  const base = rows[0]!.perSec;
  console.log(`network: ${WORKFLOWS} workflows × ${STEPS} steps, 2 nodes × ${CONCURRENCY} workers, Postgres behind the relay`);
  for (const r of rows) console.log(`  RTT ${String(r.rtt).padStart(2)} ms  ${r.perSec.toFixed(0).padStart(6)} steps/s  ${(r.perSec / base).toFixed(2)} of RTT 0`);
  await db.close();
  await svc.proc.kill();
  await relay.proc.kill();
} finally {
  for (const n of nodes) await n.kill();
  await pg?.destroy();
  await net.destroy();
  scratch.remove();
}
