import type { Context } from '@opentelemetry/api';
import type { StepOutcome } from '../../contracts/index.ts';
import { M2mError, TokenRefused } from './errors.ts';
import { type HandlerProfiles, resolveHandler } from './handlers.ts';
import { callHttp } from './http-call.ts';
import type { Credential, Identities } from './m2m/identities.ts';

/** One call to an owning service: a proxy-back step, its compensation, or a func step's host call. */
export interface HandlerCall {
  handler: string;
  /** The env of the instance the call is made for: its identity is the one used. */
  env: string;
  method: string;
  path: string;
  headers: Record<string, string>;
  body: unknown;
  timeoutMs: number;
  signal?: AbortSignal | undefined;
  maxBodyBytes?: number | undefined;
  /** The calling span's trace context: the call sends its `traceparent` (http-call.ts, `HttpCall.trace`). */
  trace?: Context | undefined;
  /** That context's span is the call's client span (a proxy step's attempt): see `HttpCall.traceIsCall`. */
  traceIsCall?: boolean | undefined;
}

/**
 * Calls the handler as its identity for the env. A 401 to an OAuth token is answered once: the
 * token is dropped, a new one fetched, and the same request (same idempotency key) sent again; a
 * 401 to that one too fails FLOW_M2M_TOKEN_REFUSED. An identity that cannot be had (token endpoint,
 * registration) fails with its coded error, retryable as the error says.
 */
export async function callHandler(handlers: HandlerProfiles, identities: Identities, c: HandlerCall): Promise<StepOutcome> {
  const profile = resolveHandler(handlers, c.handler);
  const identity = identities.for(c.handler, profile, c.env);
  const url = profile.url.replace(/\/$/, '') + c.path;
  const send = (cred: Credential) =>
    callHttp({
      method: c.method,
      url,
      headers: { ...c.headers, ...cred.headers },
      body: c.body,
      timeoutMs: c.timeoutMs,
      signal: c.signal,
      maxBodyBytes: c.maxBodyBytes,
      trace: c.trace,
      traceIsCall: c.traceIsCall,
      // the identity's agent speaks TLS: a plain http:// service (development) gets the shared one
      ...(cred.agent === undefined || !url.startsWith('https:') ? {} : { agent: cred.agent }),
    });
  try {
    const first = await identity.credential();
    const out = await send(first);
    if (!unauthorized(out) || first.token === undefined) return out;
    identity.refused(first);
    const again = await send(await identity.credential());
    return unauthorized(again) ? refusal(new TokenRefused(identity.name, url)) : again;
  } catch (err) {
    if (err instanceof M2mError) return refusal(err);
    throw err;
  }
}

function unauthorized(out: StepOutcome): boolean {
  return out.status === 'failed' && out.error.status === 401;
}

function refusal(err: M2mError): StepOutcome {
  return { status: 'failed', retryable: err.retryable, error: { code: err.code, message: err.message } };
}
