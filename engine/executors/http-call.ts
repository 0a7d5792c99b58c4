import type { StepOutcome } from '../../contracts/index.ts';

export interface HttpCall {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: unknown;
  timeoutMs: number;
}

const MAX_ERROR_BODY = 500;

/**
 * Makes one HTTP call and classifies the answer (DESIGN.md §3, contract): 2xx succeeds with the
 * JSON body (or null); 202 `{"status":"waiting"}` parks; 408, 429, 5xx, network errors and
 * timeouts are transient (honouring Retry-After); any other 4xx is permanent. Node's fetch keeps
 * connections alive between calls.
 */
export async function callHttp(call: HttpCall): Promise<StepOutcome> {
  let res: Response;
  try {
    res = await fetch(call.url, {
      method: call.method,
      headers: call.method === 'GET' ? call.headers : { 'content-type': 'application/json', ...call.headers },
      body: call.method === 'GET' ? undefined : JSON.stringify(call.body ?? null),
      signal: AbortSignal.timeout(call.timeoutMs),
    });
  } catch (err) {
    const e = err as Error;
    const timedOut = e.name === 'TimeoutError' || e.name === 'AbortError';
    return {
      status: 'failed',
      retryable: true,
      error: timedOut
        ? { code: 'STEP_TIMEOUT', message: `no answer from ${call.method} ${call.url} within ${call.timeoutMs} ms` }
        : { code: 'NETWORK_ERROR', message: `${call.method} ${call.url}: ${causeMessage(e)}` },
    };
  }
  const text = await res.text();
  if (res.status >= 200 && res.status < 300) {
    let body: unknown = null;
    if (text.trim() !== '') {
      try {
        body = JSON.parse(text);
      } catch {
        return {
          status: 'failed',
          retryable: false,
          error: { code: 'BAD_RESPONSE', message: `${call.method} ${call.url} answered ${res.status} with a body that is not JSON`, status: res.status },
        };
      }
    }
    if (res.status === 202 && (body as { status?: unknown } | null)?.status === 'waiting') return { status: 'parked' };
    return { status: 'succeeded', output: body };
  }
  const transient = res.status === 408 || res.status === 429 || res.status >= 500;
  const retryAfterMs = parseRetryAfter(res.headers.get('retry-after'));
  return {
    status: 'failed',
    retryable: transient,
    ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
    error: { code: `HTTP_${res.status}`, message: errorMessage(call, res.status, text), status: res.status },
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

function causeMessage(e: Error): string {
  const cause = (e as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? e.message;
}
