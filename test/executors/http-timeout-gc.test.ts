import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

/**
 * A call with both a deadline and an abandon signal (the worker's lease) must end at its deadline
 * even when the garbage collector runs meanwhile. Node 20's AbortSignal.any() holds a timeout
 * signal weakly (nodejs/node#57736): collected before it fires, it never aborts, and the call
 * waits on a silent service for ever. Under a loaded CI this hung a compensation for a minute.
 * The child process forces collections while the call is in flight.
 */
const SCRIPT = `
import { createServer } from 'node:http';
import { callHttp } from './engine/executors/http-call.ts';
const server = createServer(() => {}); // never answers
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const url = 'http://127.0.0.1:' + server.address().port + '/silent';
const lease = new AbortController();
const gcs = setInterval(() => globalThis.gc(), 5);
const out = await Promise.race([
  callHttp({ method: 'POST', url, headers: {}, body: {}, timeoutMs: 300, signal: lease.signal }),
  new Promise((r) => setTimeout(() => r({ hung: true }), 10_000)),
]);
clearInterval(gcs);
server.closeAllConnections();
server.close();
console.log(JSON.stringify(out));
`;

it('a call with a lease signal still times out when the garbage collector runs during it', async () => {
  const { stdout } = await promisify(execFile)(process.execPath, ['--expose-gc', '--import', 'tsx', '--input-type=module', '-e', SCRIPT], {
    cwd: new URL('../..', import.meta.url).pathname,
  });
  expect(JSON.parse(stdout.trim().split('\n').at(-1)!)).toMatchObject({ status: 'failed', retryable: true, error: { code: 'STEP_TIMEOUT' } });
}, 30_000);
