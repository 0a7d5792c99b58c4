import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { callHttp } from '../../engine/executors/http-call.ts';

// callHttp ends a call on its deadline or the caller's abandon itself (no AbortSignal handed to
// node) and parses each URL once: the path with its query must still reach the service, and each
// way a call ends must still be told apart.
let server: Server;
let base: string;
beforeAll(async () => {
  server = createServer((req, res) => {
    if (req.url?.startsWith('/silent')) return; // never answers
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ url: req.url, method: req.method }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => {
  server.closeAllConnections();
  server.close();
});

it('sends the path and query of the URL, the same on the second call', async () => {
  for (let i = 0; i < 2; i++) {
    const out = await callHttp({ method: 'POST', url: `${base}/a/b?x=1&y=%20`, headers: {}, body: {}, timeoutMs: 2000 });
    expect(out).toEqual({ status: 'succeeded', output: { url: '/a/b?x=1&y=%20', method: 'POST' } });
  }
});

it('a call past its deadline fails STEP_TIMEOUT; one abandoned by the caller fails ABORTED', async () => {
  expect(await callHttp({ method: 'POST', url: `${base}/silent`, headers: {}, body: {}, timeoutMs: 100 })).toMatchObject({
    status: 'failed',
    retryable: true,
    error: { code: 'STEP_TIMEOUT' },
  });
  const lease = new AbortController();
  setTimeout(() => lease.abort(new Error('lease lost')), 50);
  expect(await callHttp({ method: 'POST', url: `${base}/silent`, headers: {}, body: {}, timeoutMs: 60_000, signal: lease.signal })).toMatchObject({
    status: 'failed',
    error: { code: 'ABORTED' },
  });
  const gone = new AbortController();
  gone.abort(new Error('already lost'));
  expect(await callHttp({ method: 'POST', url: `${base}/a`, headers: {}, body: {}, timeoutMs: 60_000, signal: gone.signal })).toMatchObject({
    error: { code: 'ABORTED' },
  });
});
