import http from 'node:http';
import https from 'node:https';
import type { StepOutcome } from '../../contracts/index.ts';

export interface HttpCall {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: unknown;
  timeoutMs: number;
  /** Abandons the call (the worker lost its lease); the outcome is then ABORTED, for nobody to record. */
  signal?: AbortSignal;
}

const MAX_ERROR_BODY = 500;

/**
 * Makes one HTTP call and classifies the answer (ARCHITECTURE.md, Contracts: outbound calls): 2xx succeeds with the
 * JSON body (or null); 202 `{"status":"waiting"}` parks; 408, 429, 5xx, network errors and
 * timeouts are transient (honouring Retry-After); any other 4xx is permanent.
 */
export async function callHttp(call: HttpCall): Promise<StepOutcome> {
  let res: { status: number; headers: Record<string, string | string[] | undefined>; text: string };
  try {
    res = await send(call);
  } catch (err) {
    const e = err as Error & { code?: string };
    if (call.signal?.aborted) {
      return { status: 'failed', retryable: true, error: { code: 'ABORTED', message: `${call.method} ${call.url} abandoned: ${String(call.signal.reason)}` } };
    }
    const timedOut = e.name === 'TimeoutError' || e.name === 'AbortError' || e.code === 'ABORT_ERR';
    return {
      status: 'failed',
      retryable: true,
      error: timedOut
        ? { code: 'STEP_TIMEOUT', message: `no answer from ${call.method} ${call.url} within ${call.timeoutMs} ms` }
        : { code: 'NETWORK_ERROR', message: `${call.method} ${call.url}: ${e.code ?? e.message}` },
    };
  }
  const { status, text } = res;
  if (status >= 200 && status < 300) {
    let body: unknown = null;
    if (text.trim() !== '') {
      try {
        body = JSON.parse(text);
      } catch {
        return {
          status: 'failed',
          retryable: false,
          error: { code: 'BAD_RESPONSE', message: `${call.method} ${call.url} answered ${status} with a body that is not JSON`, status },
        };
      }
    }
    if (status === 202 && (body as { status?: unknown } | null)?.status === 'waiting') return { status: 'parked' };
    return { status: 'succeeded', output: body };
  }
  const transient = status === 408 || status === 429 || status >= 500;
  const retryAfter = res.headers['retry-after'];
  const retryAfterMs = parseRetryAfter(typeof retryAfter === 'string' ? retryAfter : null);
  return {
    status: 'failed',
    retryable: transient,
    ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
    error: { code: `HTTP_${status}`, message: errorMessage(call, status, text), status },
  };
}

// node:http with keep-alive agents: measured here at well under half the CPU per call of fetch.
const agents = { 'http:': new http.Agent({ keepAlive: true }), 'https:': new https.Agent({ keepAlive: true }) };

function send(call: HttpCall): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; text: string }> {
  const url = new URL(call.url);
  const body = call.method === 'GET' ? undefined : JSON.stringify(call.body ?? null);
  const headers: Record<string, string> = { ...call.headers };
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
    headers['content-length'] = String(Buffer.byteLength(body));
  }
  const lib = url.protocol === 'https:' ? https : http;
  const { signal, done } = deadline(call);
  return new Promise<{ status: number; headers: Record<string, string | string[] | undefined>; text: string }>((resolve, reject) => {
    const req = lib.request(
      url,
      { method: call.method, headers, agent: agents[url.protocol as 'http:'], signal },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  }).finally(done);
}

/**
 * The call's own deadline, joined with the caller's abandon signal. Not AbortSignal.any() over
 * AbortSignal.timeout(): Node 20 holds the timeout weakly there, and a collection before it fires
 * leaves the call waiting for ever (test/executors/http-timeout-gc.test.ts). `done` clears the
 * timer and the listener once the call is over.
 */
function deadline(call: HttpCall): { signal: AbortSignal; done: () => void } {
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(new DOMException(`no answer within ${call.timeoutMs} ms`, 'TimeoutError')), call.timeoutMs);
  const abandon = () => ac.abort(call.signal?.reason);
  if (call.signal?.aborted) abandon();
  else call.signal?.addEventListener('abort', abandon, { once: true });
  return {
    signal: ac.signal,
    done: () => {
      clearTimeout(timer);
      call.signal?.removeEventListener('abort', abandon);
    },
  };
}

function errorMessage(call: HttpCall, status: number, text: string): string {
  let detail = text.slice(0, MAX_ERROR_BODY);
  try {
    const body = JSON.parse(text) as { message?: unknown; error?: { message?: unknown } };
    const m = body.message ?? body.error?.message;
    if (typeof m === 'string') detail = m;
  } catch {}
  return `${call.method} ${call.url} answered ${status}${detail ? `: ${detail}` : ''}`;
}

/** Retry-After is seconds or an HTTP date (RFC 9110 §10.2.3). */
export function parseRetryAfter(value: string | null): number | undefined {
  if (value === null) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}
