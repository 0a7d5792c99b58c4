import http from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import { type Context, SpanKind, trace } from '@opentelemetry/api';
import type { StepOutcome } from '../../contracts/index.ts';
import { DEFAULT_MAX_INPUT_BYTES } from '../core/storable.ts';
import { endWith, traceParentOf, tracer } from '../tracing.ts';
import { certificateRefusal } from './m2m/tls.ts';

export interface HttpCall {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: unknown;
  timeoutMs: number;
  /**
   * The most bytes of response body read: past it the response is dropped unread, and a 2xx is
   * the permanent FLOW_RESULT_TOO_LARGE. (Default: 1 MiB)
   */
  maxBodyBytes?: number;
  /** Abandons the call (the worker lost its lease); the outcome is then ABORTED, for nobody to record. */
  signal?: AbortSignal;
  /** Resolves the host for this call only: the address the allowlist checked (allowlist.ts, `pinnedLookup`). */
  lookup?: LookupFunction;
  /**
   * The calling span's trace context (an attempt's, a host call's): the call sends its
   * `traceparent`, and gets a client span of its own under it, unless `traceIsCall`.
   */
  trace?: Context | undefined;
  /**
   * The context's span is this call's client span: a proxy or http step's attempt, which is one
   * call and is started as a CLIENT span (runtime/trace-spans.ts), so a step makes one span, not two.
   * The call adds its HTTP attributes to it and leaves ending it to the attempt.
   */
  traceIsCall?: boolean | undefined;
  /** The agent presenting a handler's client certificate (engine/executors/m2m/tls.ts). (Default: a shared keep-alive agent) */
  agent?: http.Agent;
}

const MAX_ERROR_BODY = 500;

/**
 * Makes one HTTP call and classifies the answer (ARCHITECTURE.md, Contracts: outbound calls): 2xx succeeds with the
 * JSON body (or null); 202 `{"status":"waiting"}` parks; 408, 429, 5xx, network errors and
 * timeouts are transient (honouring Retry-After); any other 4xx is permanent.
 */
export async function callHttp(call: HttpCall): Promise<StepOutcome> {
  // the HTTP client span: the attempt's own (traceIsCall), or a child of the attempt or host call;
  // the service gets its traceparent, so its own spans join the instance's trace
  if (call.trace === undefined) return classify(call);
  const given = call.traceIsCall === true ? trace.getSpan(call.trace) : undefined;
  const span = given ?? tracer().startSpan(call.method, { kind: SpanKind.CLIENT }, call.trace);
  const traceparent = traceParentOf(span);
  if (traceparent === null) {
    if (given === undefined) span.end();
    return classify(call);
  }
  if (span.isRecording()) {
    const target = requestTarget(call.url);
    span.setAttributes({ 'http.request.method': call.method, 'url.full': call.url, 'server.address': target.hostname, 'server.port': Number(target.port || (target.protocol === 'https:' ? 443 : 80)) });
  }
  const outcome = await classify({ ...call, headers: { ...call.headers, traceparent } });
  if (outcome.status === 'failed' && outcome.error.status !== undefined) span.setAttribute('http.response.status_code', outcome.error.status);
  if (given === undefined) endWith(span, outcome);
  return outcome;
}

async function classify(call: HttpCall): Promise<StepOutcome> {
  let res: Answer;
  try {
    res = await send(call);
  } catch (err) {
    const e = err as Error & { code?: string };
    if (call.signal?.aborted) {
      return { status: 'failed', retryable: true, error: { code: 'ABORTED', message: `${call.method} ${call.url} abandoned: ${String(call.signal.reason)}` } };
    }
    const refused = call.agent === undefined ? null : certificateRefusal(e, (e as { freshConnection?: boolean }).freshConnection === true);
    if (refused !== null) {
      const how = refused.retryable ? 'closed the fresh connection that presented' : 'refused';
      const message = `${call.method} ${call.url}: the service ${how} the client certificate (${e.code}); check the handler's TLS_CERT_FILE against the CA the service trusts`;
      return { status: 'failed', retryable: refused.retryable, error: { code: 'FLOW_M2M_TLS_REFUSED', message } };
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
    if (res.overflow) {
      const message = `${call.method} ${call.url} answered ${status} with a body over ${maxBodyOf(call)} bytes (maxInputBytes); it was not read`;
      return { status: 'failed', retryable: false, error: { code: 'FLOW_RESULT_TOO_LARGE', message, status } };
    }
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

/** A response as read: its body cut at the cap (`overflow`: there was more, left unread). */
interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  overflow: boolean;
}

function maxBodyOf(call: HttpCall): number {
  return call.maxBodyBytes ?? DEFAULT_MAX_INPUT_BYTES;
}

function send(call: HttpCall): Promise<Answer> {
  const target = requestTarget(call.url);
  const body = call.method === 'GET' ? undefined : JSON.stringify(call.body ?? null);
  const headers: Record<string, string> = { ...call.headers };
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
    headers['content-length'] = String(Buffer.byteLength(body));
  }
  const lib = target.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const pinned = call.lookup === undefined ? {} : { lookup: call.lookup };
    let answered = false;
    const req = lib.request({ ...target, ...pinned, method: call.method, headers, agent: call.agent ?? agents[target.protocol] }, (res) => {
      answered = true;
      const chunks: Buffer[] = [];
      const answer = (overflow: boolean) => ({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8'), overflow });
      // a body past the cap is never buffered whole: the response is dropped where it passes it
      const max = maxBodyOf(call);
      let size = 0;
      const overflow = () => {
        settle(() => resolve(answer(true)));
        res.destroy();
      };
      if (Number(res.headers['content-length']) > max) return overflow();
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size > max) return overflow();
        chunks.push(c);
      });
      res.on('end', () => settle(() => resolve(answer(false))));
      res.on('error', (e) => settle(() => reject(e)));
    });
    // The deadline and the caller's abandon end the call themselves, not through an AbortSignal
    // given to http.request: that costs an AbortController and node's signal plumbing per call
    // (~25 µs a step in bench:cpu). The first of answer, error, deadline and abandon settles it.
    const end = (err: unknown) => {
      settle(() => reject(err));
      req.destroy(err as Error);
    };
    const timer = setTimeout(() => end(new DOMException(`no answer within ${call.timeoutMs} ms`, 'TimeoutError')), call.timeoutMs);
    const abandon = () => end(call.signal?.reason);
    let settled = false;
    function settle(f: () => void) {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      call.signal?.removeEventListener('abort', abandon);
      f();
    }
    req.on('error', (e) => {
      // a connection that failed before any answer, on its first request: told apart for certificateRefusal
      if (!req.reusedSocket && !answered) Object.assign(e, { freshConnection: true });
      settle(() => reject(e));
    });
    if (call.signal?.aborted) return abandon();
    call.signal?.addEventListener('abort', abandon, { once: true });
    req.end(body);
  });
}

/**
 * What http.request needs of a URL, parsed once per URL: a step calls the same few URLs over and
 * over, and `new URL` plus node's reading of it cost ~10–20 µs a call (bench:cpu). Bounded: a
 * workflow that builds URLs from its data clears it now and then rather than growing it.
 */
const targets = new Map<string, { protocol: 'http:' | 'https:'; hostname: string; port: string; path: string; auth?: string }>();
function requestTarget(url: string) {
  let t = targets.get(url);
  if (t === undefined) {
    const u = new URL(url);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new TypeError(`Protocol "${u.protocol}" not supported. Expected "http:"`);
    t = {
      protocol: u.protocol,
      // [::1] → ::1, as node's urlToHttpOptions does
      hostname: u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname,
      port: u.port,
      path: `${u.pathname}${u.search}`,
      ...(u.username || u.password ? { auth: `${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}` } : {}),
    };
    if (targets.size >= 1000) targets.clear();
    targets.set(url, t);
  }
  return t;
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

/** An HTTP date as RFC 9110 §5.6.7 has senders write it (IMF-fixdate), e.g. `Sun, 06 Nov 1994 08:49:37 GMT`. */
const IMF_FIXDATE = /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/;

/**
 * Retry-After is seconds or an HTTP date (RFC 9110 §10.2.3). Anything else (`-1`, `1e9`, `soon`)
 * is no Retry-After: Date.parse alone would read `-1` as the year -1, a wait of zero.
 */
export function parseRetryAfter(value: string | null): number | undefined {
  if (value === null) return undefined;
  const v = value.trim();
  // the engine caps the wait (storableResult); an absurd number here is only ever "very long"
  if (/^\d+$/.test(v)) return Math.min(Number(v) * 1000, Number.MAX_SAFE_INTEGER);
  if (!IMF_FIXDATE.test(v)) return undefined;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}
