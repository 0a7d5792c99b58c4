import { DEFAULTS } from '../../contracts/index.ts';
import { callHandler } from './handler-call.ts';
import type { HandlerProfiles } from './handlers.ts';
import type { Executor } from './index.ts';
import type { Identities } from './m2m/identities.ts';

/** Proxy-back: POSTs the step input to the owning service (the handler profile) at `path`, as the handler's identity for the instance's env. */
export function proxyExecutor(handlers: HandlerProfiles, identities: Identities, maxBodyBytes?: number): Executor<'proxy'> {
  return async (def, a) =>
    callHandler(handlers, identities, {
      handler: def.handler ?? a.instance.domain,
      env: a.instance.env,
      method: def.method ?? DEFAULTS.method,
      path: def.path,
      headers: a.headers,
      body: a.input,
      timeoutMs: a.timeoutMs,
      signal: a.signal,
      trace: a.trace,
      traceIsCall: true,
      maxBodyBytes,
    });
}
