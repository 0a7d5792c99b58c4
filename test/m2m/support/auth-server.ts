import { generateKeyPairSync, X509Certificate } from 'node:crypto';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import Provider from 'oidc-provider';
import { subjectDn } from '../../../engine/executors/m2m/registration.ts';
import type { Issued, TestCa } from './test-ca.ts';

/** The resource indicator the owning service's tokens are issued for (their `aud`). */
export const RESOURCE = 'https://ledger.test';

/** One request the token endpoint received. */
export interface TokenRequest {
  /** The CN of the client certificate presented on TLS, if any. */
  certCn: string | null;
  status: number;
}

export interface AuthServerOptions {
  ca: TestCa;
  server: Issued;
  /** Clients known up front (oidc-provider metadata). */
  clients: Record<string, unknown>[];
  /** Lifetime of the access tokens, seconds. (Default: 300) */
  tokenTtl?: number;
}

/**
 * A real authorization server, oidc-provider, on 127.0.0.1 over TLS with the test CA: client
 * credentials, dynamic registration (open), mTLS client authentication and certificate-bound
 * access tokens (RFC 8705), JWT access tokens for RESOURCE (resource indicators).
 */
export class AuthServer {
  readonly tokenRequests: TokenRequest[] = [];
  /** Makes the token endpoint answer 503 while set. */
  down = false;
  /** Registration requests received (RFC 7591). */
  registrations = 0;
  readonly #server: https.Server;
  issuer = '';
  /** The public keys access tokens are signed with, as the JWKS endpoint serves them. */
  readonly #signing = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  provider!: Provider;

  constructor(readonly opts: AuthServerOptions) {
    const { ca, server } = opts;
    this.#server = https.createServer({ key: server.key, cert: server.cert, ca: ca.ca.cert, requestCert: true, rejectUnauthorized: false });
  }

  async listen(): Promise<this> {
    await new Promise<void>((r) => this.#server.listen(0, '127.0.0.1', r));
    this.issuer = `https://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    const ttl = this.opts.tokenTtl ?? 300;
    const peer = (ctx: { socket: TLSSocket }) => {
      const raw = ctx.socket.getPeerCertificate()?.raw;
      return raw === undefined ? undefined : new X509Certificate(raw);
    };
    this.provider = new Provider(this.issuer, {
      clients: this.opts.clients,
      jwks: { keys: [{ ...this.#signing.privateKey.export({ format: 'jwk' }), alg: 'ES256', use: 'sig', kid: 'signing' }] as never },
      cookies: { keys: ['test-cookie-key'] },
      clientDefaults: { id_token_signed_response_alg: 'ES256', grant_types: ['client_credentials'], response_types: [] },
      clientAuthMethods: ['client_secret_basic', 'private_key_jwt', 'tls_client_auth', 'self_signed_tls_client_auth'],
      enabledJWA: { clientAuthSigningAlgValues: ['ES256', 'RS256', 'EdDSA'] } as never,
      ttl: { ClientCredentials: ttl },
      features: {
        devInteractions: { enabled: false },
        clientCredentials: { enabled: true },
        registration: { enabled: true },
        introspection: { enabled: false },
        mTLS: {
          enabled: true,
          certificateBoundAccessTokens: true,
          tlsClientAuth: true,
          selfSignedTlsClientAuth: true,
          getCertificate: (ctx: never) => peer(ctx),
          certificateAuthorized: (ctx: never) => (ctx as { socket: TLSSocket }).socket.authorized,
          certificateSubjectMatches: (ctx: never, property: string, expected: string) =>
            property === 'tls_client_auth_subject_dn' && subjectDn(peer(ctx)?.subject ?? '') === expected,
        },
        resourceIndicators: {
          enabled: true,
          defaultResource: () => RESOURCE,
          useGrantedResource: () => true,
          getResourceServerInfo: () => ({ scope: 'ledger', audience: RESOURCE, accessTokenTTL: ttl, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'ES256' } } }),
        },
      },
    });
    const handle = this.provider.callback();
    this.#server.on('request', (req, res) => {
      if (req.method === 'POST' && req.url?.startsWith('/reg')) this.registrations++;
      if (req.method === 'POST' && req.url?.startsWith('/token')) {
        const cert = (req.socket as TLSSocket).getPeerCertificate();
        const certCn = cert?.subject?.CN === undefined ? null : String(cert.subject.CN);
        if (this.down) {
          res.writeHead(503, { 'content-type': 'text/plain' }).end('down for maintenance');
          this.tokenRequests.push({ certCn, status: 503 });
          return;
        }
        res.on('finish', () => this.tokenRequests.push({ certCn, status: res.statusCode }));
      }
      handle(req, res);
    });
    return this;
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((r) => this.#server.close(() => r()));
  }
}
