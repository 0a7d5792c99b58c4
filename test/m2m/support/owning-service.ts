import { createHash } from 'node:crypto';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { createLocalJWKSet, type JWTPayload, jwtVerify } from 'jose';
import { RESOURCE } from './auth-server.ts';
import type { Issued, TestCa } from './test-ca.ts';

/** One call the service took, as it saw it on the wire. */
export interface SeenCall {
  path: string;
  env: string | undefined;
  idempotencyKey: string | undefined;
  /** CN of the client certificate on the TLS connection. */
  certCn: string | null;
  /** The token's claims when it verified, else null. */
  claims: (JWTPayload & { cnf?: Record<string, string>; client_id?: string }) | null;
  /** The token's `cnf.x5t#S256` matched the certificate on the connection. */
  bound: boolean;
  status: number;
  /** The bearer token as received: kept here, in the test, to look for it where it must not be. */
  token: string | undefined;
}

/**
 * An owning service as a real one would check the engine: with `mtls`, TLS with a client certificate
 * the test CA signed (refused in the handshake otherwise); a JWT access token verified against the
 * authorization server's JWKS (issuer, audience, expiry) and, with `mtls`, bound to the
 * very certificate the connection presented (RFC 8705 §3: `cnf.x5t#S256`). Each call is recorded.
 */
export class OwningService {
  readonly calls: SeenCall[] = [];
  /** Token ids (`jti`) the service no longer takes: their next use answers 401. */
  readonly revoked = new Set<string>();
  /** Answers 401 to every token while set (a service that does not take this client's tokens at all). */
  refuseAll = false;
  readonly #server: https.Server;
  #jwks: ReturnType<typeof createLocalJWKSet> | null = null;
  url = '';

  constructor(
    readonly opts: { ca: TestCa; server: Issued; issuer: () => string; mtls: boolean },
  ) {
    this.#server = https.createServer({ key: opts.server.key, cert: opts.server.cert, ca: opts.ca.ca.cert, requestCert: opts.mtls, rejectUnauthorized: opts.mtls }, (req, res) => {
      const body: Buffer[] = [];
      req.on('data', (c: Buffer) => body.push(c));
      req.on('end', () => {
        void this.#answer(req, (req.socket as TLSSocket)).then((status) => {
          res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(status === 200 ? { ok: true } : { message: 'unauthorized' }));
        });
      });
    });
  }

  async listen(): Promise<this> {
    await new Promise<void>((r) => this.#server.listen(0, '127.0.0.1', r));
    this.url = `https://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this;
  }

  /** Revokes every token seen so far. */
  revokeSeen(): void {
    for (const c of this.calls) if (c.claims?.jti !== undefined) this.revoked.add(c.claims.jti);
  }

  async #answer(req: import('node:http').IncomingMessage, socket: TLSSocket): Promise<number> {
    const cert = socket.getPeerCertificate();
    const seen: SeenCall = {
      path: req.url ?? '',
      env: header(req, 'x-flow-env'),
      idempotencyKey: header(req, 'idempotency-key'),
      certCn: cert?.subject?.CN === undefined ? null : String(cert.subject.CN),
      claims: null,
      bound: false,
      status: 401,
      token: undefined,
    };
    this.calls.push(seen);
    const token = /^Bearer (.+)$/.exec(header(req, 'authorization') ?? '')?.[1];
    seen.token = token;
    if (token === undefined) return seen.status;
    try {
      const { payload } = await jwtVerify(token, await this.#keys(), { issuer: this.opts.issuer(), audience: RESOURCE });
      seen.claims = payload as SeenCall['claims'];
    } catch {
      return seen.status;
    }
    const thumbprint = cert?.raw === undefined ? null : createHash('sha256').update(cert.raw).digest('base64url');
    seen.bound = thumbprint !== null && seen.claims?.cnf?.['x5t#S256'] === thumbprint;
    if (this.opts.mtls && !seen.bound) return seen.status;
    if (this.refuseAll || (seen.claims?.jti !== undefined && this.revoked.has(seen.claims.jti))) return seen.status;
    seen.status = 200;
    return seen.status;
  }

  /** The authorization server's JWKS, fetched once from its jwks_uri over TLS with the test CA. */
  async #keys(): Promise<ReturnType<typeof createLocalJWKSet>> {
    if (this.#jwks !== null) return this.#jwks;
    const text = await new Promise<string>((resolve, reject) => {
      https
        .get(`${this.opts.issuer()}/jwks`, { ca: this.opts.ca.ca.cert }, (res) => {
          let s = '';
          res.on('data', (c) => (s += c));
          res.on('end', () => resolve(s));
        })
        .on('error', reject);
    });
    this.#jwks = createLocalJWKSet(JSON.parse(text));
    return this.#jwks;
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((r) => this.#server.close(() => r()));
  }
}

function header(req: import('node:http').IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}
