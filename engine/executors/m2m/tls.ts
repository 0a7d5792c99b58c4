import { createHash, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import type { IdentitySettings } from './settings.ts';

/** The TLS side of an identity: the client certificate it presents, and the CA it trusts. */
export interface ClientTls {
  /** Presents the certificate (when one is set) and trusts `TLS_CA_FILE` (when set), on keep-alive sockets. */
  agent: https.Agent;
  /** The certificate (PEM), for registration; absent without TLS_CERT_FILE. */
  cert?: X509Certificate;
}

/** Reads the files once; undefined when the identity sets neither a certificate nor a CA. */
export function loadTls(s: IdentitySettings): ClientTls | undefined {
  if (s.certFile === undefined && s.caFile === undefined) return undefined;
  const cert = s.certFile === undefined ? undefined : readFileSync(s.certFile);
  const agent = new https.Agent({
    keepAlive: true,
    ...(cert === undefined ? {} : { cert, key: readFileSync(s.keyFile!) }),
    ...(s.caFile === undefined ? {} : { ca: readFileSync(s.caFile) }),
  });
  return { agent, ...(cert === undefined ? {} : { cert: new X509Certificate(cert) }) };
}

/** RFC 8705 §3.1: the base64url SHA-256 of the DER certificate, as a bound token's `cnf.x5t#S256`. */
export function certThumbprint(cert: X509Certificate): string {
  return createHash('sha256').update(cert.raw).digest('base64url');
}

/**
 * A `fetch` for oauth4webapi that goes over node:https with `agent`: the token and registration
 * requests then carry the same client certificate as the calls the token is bound to (RFC 8705).
 */
export function fetchOver(agent: https.Agent): (url: string, init: RequestInit) => Promise<Response> {
  return (url, init) =>
    new Promise((resolve, reject) => {
      const headers: Record<string, string> = {};
      new Headers(init.headers).forEach((v, k) => {
        headers[k] = v;
      });
      const body = init.body === undefined || init.body === null ? undefined : String(init.body);
      const req = https.request(url, { method: init.method ?? 'GET', headers, agent }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const out = new Headers();
          for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) out.set(k, Array.isArray(v) ? v.join(', ') : v);
          const status = res.statusCode ?? 0;
          resolve(new Response(status === 204 || status === 304 ? null : Buffer.concat(chunks), { status, headers: out }));
        });
      });
      req.on('error', reject);
      init.signal?.addEventListener('abort', () => req.destroy(init.signal?.reason as Error), { once: true });
      req.end(body);
    });
}

/**
 * A TLS alert from the peer: it refused the certificate this side presented (or presented none it
 * would take). Node names them `ERR_SSL_…_ALERT_…` (`…_UNKNOWN_CA`, `…_CERTIFICATE_REQUIRED`, `…_BAD_CERTIFICATE`).
 */
export function isTlsRefusal(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^ERR_SSL_.*ALERT/.test(code);
}

/**
 * What a call that presented a client certificate makes of its connection failing: a TLS alert is
 * a refusal of the certificate (permanent); a connection reset on a fresh connection before any
 * answer is what a server that checks certificates after the handshake (node's `rejectUnauthorized`)
 * does with one it refuses, and also what a restart looks like: refused, but retryable.
 */
export function certificateRefusal(err: unknown, freshConnection: boolean): { retryable: boolean } | null {
  if (isTlsRefusal(err)) return { retryable: false };
  if (freshConnection && (err as { code?: unknown } | null)?.code === 'ECONNRESET') return { retryable: true };
  return null;
}
