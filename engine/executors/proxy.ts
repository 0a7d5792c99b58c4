import { DEFAULTS, type StepOutcome } from '../../contracts/index.ts';
import { M2mError, TokenRefused } from './errors.ts';
import { type HandlerProfiles, resolveHandler } from './handlers.ts';
import { callHttp } from './http-call.ts';
import type { Executor } from './index.ts';
import type { Credential, Identities } from './m2m/identities.ts';

/**
 * Proxy-back: POSTs the step input to the owning service (the handler profile) at `path`, as the
 * handler's identity for the instance's env. A 401 to an OAuth token is answered once: the token
 * is dropped, a new one fetched, and the same request (same idempotency key) sent again.
 */
export function proxyExecutor(handlers: HandlerProfiles, identities: Identities, maxBodyBytes?: number): Executor<'proxy'> {
  return async (def, a) => {
    const handler = def.handler ?? a.instance.domain;
    const profile = resolveHandler(handlers, handler);
    const identity = identities.for(handler, profile, a.instance.env);
    const url = profile.url.replace(/\/$/, '') + def.path;
    const call = (c: Credential) =>
      callHttp({
        method: def.method ?? DEFAULTS.method,
        url,
        headers: { ...a.headers, ...c.headers },
        body: a.input,
        timeoutMs: a.timeoutMs,
        signal: a.signal,
        maxBodyBytes,
        ...(c.agent === undefined ? {} : { agent: c.agent }),
      });
    try {
      const first = await identity.credential();
      const out = await call(first);
      if (!unauthorized(out) || first.token === undefined) return out;
      identity.refused(first);
      const again = await call(await identity.credential());
      return unauthorized(again) ? refusal(new TokenRefused(identity.name, url)) : again;
    } catch (err) {
      if (err instanceof M2mError) return refusal(err);
      throw err;
    }
  };
}

function unauthorized(out: StepOutcome): boolean {
  return out.status === 'failed' && out.error.status === 401;
}

function refusal(err: M2mError): StepOutcome {
  return { status: 'failed', retryable: err.retryable, error: { code: err.code, message: err.message } };
}
