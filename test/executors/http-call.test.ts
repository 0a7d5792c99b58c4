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
    const big = /^\/big\/(\d+)\/(declared|chunked)$/.exec(req.url ?? '');
    if (big !== null) {
      const body = JSON.stringify({ message: 'x'.repeat(4096) });
      res.writeHead(Number(big[1]), big[2] === 'declared' ? { 'content-length': String(Buffer.byteLength(body)) } : {});
      return void res.end(body);
    }
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

it('a body past maxBodyBytes is not read: a 2xx fails FLOW_RESULT_TOO_LARGE, any other status keeps its meaning', async () => {
  for (const how of ['declared', 'chunked']) {
    const ok = await callHttp({ method: 'POST', url: `${base}/big/200/${how}`, headers: {}, body: {}, timeoutMs: 2000, maxBodyBytes: 1024 });
    expect(ok, how).toMatchObject({ status: 'failed', retryable: false, error: { code: 'FLOW_RESULT_TOO_LARGE', status: 200 } });
    const busy = await callHttp({ method: 'POST', url: `${base}/big/503/${how}`, headers: {}, body: {}, timeoutMs: 2000, maxBodyBytes: 1024 });
    expect(busy, how).toMatchObject({ status: 'failed', retryable: true, error: { code: 'HTTP_503', status: 503 } });
    const within = await callHttp({ method: 'POST', url: `${base}/big/200/${how}`, headers: {}, body: {}, timeoutMs: 2000, maxBodyBytes: 8192 });
    expect(within.status, how).toBe('succeeded');
  }
});
