import type { FastifyServerOptions } from 'fastify';

/** A callback path names its resume token: a bearer credential for one parked step. */
const CALLBACK_PATH = /^(\/v1\/callbacks\/)[^/?#]*/;

/**
 * `url` with a resume token replaced by `{resumeToken}`, for everything that repeats a request's
 * URL to someone other than its caller: the request log and a problem's `instance` and `detail`.
 */
export function redactUrl(url: string): string {
  return url.replace(CALLBACK_PATH, '$1{resumeToken}');
}

interface LoggedRequest {
  method: string;
  url: string;
  host?: string;
  ip?: string;
  headers?: Record<string, unknown>;
  socket?: { remotePort?: number };
}

/** Fastify's logger options with the request serializer redacting resume tokens (as fastify's default, with the url redacted). */
export function redactingLogger(logger: FastifyServerOptions['logger'] | undefined): FastifyServerOptions['logger'] {
  if (logger === undefined || logger === false) return false;
  const base = logger === true ? {} : logger;
  const req = (r: LoggedRequest) => ({
    method: r.method,
    url: redactUrl(r.url),
    version: r.headers?.['accept-version'],
    host: r.host,
    remoteAddress: r.ip,
    remotePort: r.socket?.remotePort,
  });
  return { ...base, serializers: { ...(base as { serializers?: Record<string, unknown> }).serializers, req } } as FastifyServerOptions['logger'];
}
