import { appendFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { type Delivery, IdempotencyLedger, kindOfKey } from '../../support/idempotency-ledger.ts';

/**
 * The owning service of the network tests, run in a namespace of its own:
 * `service-main.ts <host> <port> <log file>`. Every operation is mounted under the caller's name
 * (`/e1/step`), goes through an idempotency ledger (the first success per key is stored and
 * replayed), and every delivery is appended to the log as one JSON line the moment it is decided,
 * so the test reads what the service saw even if the service is killed.
 * - `step` answers at once;
 * - `slow` applies its effect, then holds the answer for SLOW_MS (a window to cut the network in).
 * With STORE_URL (a unix socket: sockets are not namespaced, so no fault touches it) each call
 * asks the store, as it arrives, whether its key's success is already committed: such a call means
 * a committed step ran again (`afterCommit`).
 */
const [host, port, logFile] = process.argv.slice(2);
const SLOW_MS = Number(process.env['SLOW_MS'] ?? 1500);
const ledger = new IdempotencyLedger<number>((status) => (status < 300 ? 'success' : status >= 500 ? 'transient' : 'refused'));

const store = process.env['STORE_URL'] ? new pg.Pool({ connectionString: process.env['STORE_URL'], max: 4, options: '-c search_path=flow -c statement_timeout=1000' }) : null;
store?.on('error', () => {});

/** Unknown (false) while the store is away: the check is then only as strong as the store's answers. */
async function committed(key: string): Promise<boolean> {
  const res = await store?.query(`SELECT 1 FROM step_runs WHERE idempotency_key = $1 AND state = 'succeeded' LIMIT 1`, [key]).catch(() => null);
  return (res?.rowCount ?? 0) > 0;
}

function record(d: Delivery): void {
  appendFileSync(logFile!, `${JSON.stringify(d)}\n`);
}

const server = createServer(async (req, res) => {
  for await (const _ of req) {
    // the body carries nothing the service needs
  }
  const [, via, op] = (req.url ?? '').split('/');
  const key = String(req.headers['idempotency-key'] ?? '');
  const info = {
    key,
    attempt: Number(req.headers['x-flow-attempt']),
    op: `/${op}`,
    workflowId: String(req.headers['x-flow-workflow-id'] ?? ''),
    via: `/${via}`,
    kind: kindOfKey(key),
    at: Date.now(),
  };
  // asked before the answer leaves: once it has, the engine may commit the success at any moment
  const afterCommit = await committed(key);
  const { result, delivery } = ledger.deliver(info, () => 200, { afterCommit });
  record(delivery);
  if (op === 'slow') await sleep(SLOW_MS);
  res.writeHead(result, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ ok: true, op }));
});
server.listen(Number(port), host, () => console.log(`service ready on ${host}:${port}`));
