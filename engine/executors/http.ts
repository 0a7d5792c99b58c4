import { withoutReservedHeaders } from '../../contracts/http-headers.ts';
import { isLiteralUrl } from '../../contracts/index.ts';
import { evaluate } from '../core/expressions.ts';
import { hostAllowed, pinnedLookup, type Resolve, systemResolve } from './allowlist.ts';
import { HostNotAllowed } from './errors.ts';
import { callHttp } from './http-call.ts';
import type { Executor } from './index.ts';

/**
 * Built-in HTTP call to a URL on the engine's allowlist: the host by name, then the address it
 * resolves to (engine/executors/allowlist.ts, `pinnedLookup`), which the call then connects to.
 */
export function httpExecutor(allowlist: readonly string[], resolve: Resolve = systemResolve, maxBodyBytes?: number): Executor<'http'> {
  const allowed = new Set(allowlist);
  return async (def, a) => {
    const url = isLiteralUrl(def.url) ? def.url : String(await evaluate('url', def.url, a.instance));
    const parsed = new URL(url);
    if (!hostAllowed(allowed, parsed)) throw new HostNotAllowed(parsed.host);
    let lookup: Awaited<ReturnType<typeof pinnedLookup>>;
    try {
      lookup = await pinnedLookup(allowed, parsed, resolve);
    } catch (err) {
      // a name that does not resolve (now) is a network error, as it was when http.request resolved it
      const code = (err as { code?: string }).code ?? String(err);
      return { status: 'failed', retryable: true, error: { code: 'NETWORK_ERROR', message: `${def.method} ${url}: ${code}` } };
    }
    if (lookup === null) throw new HostNotAllowed(parsed.host, 'resolves to an internal address the allowlist does not name');
    return callHttp({
      method: def.method,
      url,
      headers: { ...withoutReservedHeaders(def.headers), ...a.headers },
      body: a.input,
      timeoutMs: a.timeoutMs,
      signal: a.signal,
      trace: a.trace,
      traceIsCall: true,
      ...(lookup === undefined ? {} : { lookup }),
      maxBodyBytes,
    });
  };
}
