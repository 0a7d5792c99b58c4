import { DEFAULTS } from '../../contracts/index.ts';
import { authorizationFor, type HandlerProfiles, resolveHandler } from './handlers.ts';
import { callHttp } from './http-call.ts';
import type { Executor } from './index.ts';

/** Proxy-back: POSTs the step input to the owning service (the handler profile) at `path`. */
export function proxyExecutor(handlers: HandlerProfiles, maxBodyBytes?: number): Executor<'proxy'> {
  return async (def, a) => {
    const profile = resolveHandler(handlers, def.handler ?? a.instance.domain);
    return callHttp({
      method: def.method ?? DEFAULTS.method,
      url: profile.url.replace(/\/$/, '') + def.path,
      headers: { ...a.headers, ...authorizationFor(profile, a.instance.env) },
      body: a.input,
      timeoutMs: a.timeoutMs,
      signal: a.signal,
      trace: a.trace,
      maxBodyBytes,
    });
  };
}
