import { isLiteralUrl } from '../../contracts/index.ts';
import { evaluate } from '../core/expressions.ts';
import { hostAllowed } from './allowlist.ts';
import { HostNotAllowed } from './errors.ts';
import { callHttp } from './http-call.ts';
import type { Executor } from './index.ts';

/** Built-in HTTP call to a URL on the engine's allowlist. */
export function httpExecutor(allowlist: readonly string[], maxBodyBytes?: number): Executor<'http'> {
  const allowed = new Set(allowlist);
  return async (def, a) => {
    const url = isLiteralUrl(def.url) ? def.url : String(await evaluate('url', def.url, a.instance));
    const parsed = new URL(url);
    if (!hostAllowed(allowed, parsed)) throw new HostNotAllowed(parsed.host);
    return callHttp({
      method: def.method,
      url,
      headers: { ...def.headers, ...a.headers },
      body: a.input,
      timeoutMs: a.timeoutMs,
      signal: a.signal,
      maxBodyBytes,
    });
  };
}
