import { createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { importPKCS8 } from 'jose';
import * as oauth from 'oauth4webapi';
import { ClientRefused, M2mError, TlsRefused, TokenUnavailable } from '../errors.ts';
import type { IdentitySettings } from './settings.ts';
import { type ClientTls, fetchOver, isTlsRefusal } from './tls.ts';

/** The client the token request authenticates as: configured, or registered (registration.ts). */
export interface OAuthClient {
  clientId: string;
  clientSecret?: string;
}

/** Where the token endpoint is and how to reach it, for one identity. */
export interface TokenEndpoint {
  /** Names the identity in errors (`PAY`, `PAY__TEAM_A`); never a secret. */
  name: string;
  settings: IdentitySettings;
  tls: ClientTls | undefined;
  /** The client to authenticate as; a registered one is read (or registered) on the first call. */
  client: () => Promise<OAuthClient>;
  /** The engine's clock for the cache. (Default: Date.now) */
  now: () => number;
}

/** A token is refreshed this long before it expires, or a tenth of its life if that is shorter. */
const REFRESH_MARGIN_MS = 30_000;
/** How long a token without `expires_in` is used (a 401 refreshes it sooner). */
const UNKNOWN_LIFETIME_MS = 300_000;

/** The options every oauth4webapi request of an identity takes: its TLS agent when it has one. */
export function requestOptions(tls: ClientTls | undefined): { [oauth.customFetch]?: ReturnType<typeof fetchOver> } {
  return tls === undefined ? {} : { [oauth.customFetch]: fetchOver(tls.agent) };
}

/**
 * The authorization server of an identity: discovered from OAUTH_ISSUER (OpenID Connect
 * Discovery, else RFC 8414), else the
 * token endpoint alone, whose URL is then also the audience of a private_key_jwt assertion.
 */
export async function authorizationServer(name: string, s: IdentitySettings, tls: ClientTls | undefined): Promise<oauth.AuthorizationServer> {
  if (s.issuer === undefined) return { issuer: s.tokenEndpoint!, token_endpoint: s.tokenEndpoint! };
  const issuer = new URL(s.issuer);
  // OpenID Connect's well-known document first (most servers serve it), RFC 8414's where it is absent
  const as = await asked(name, s.issuer, async () => {
    const oidc = await oauth.discoveryRequest(issuer, { algorithm: 'oidc', ...requestOptions(tls) });
    const res = oidc.status === 404 ? await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...requestOptions(tls) }) : oidc;
    return oauth.processDiscoveryResponse(issuer, res);
  });
  return s.tokenEndpoint === undefined ? as : { ...as, token_endpoint: s.tokenEndpoint };
}

/**
 * OAuth 2.0 client credentials (RFC 6749 §4.4) for one identity. The token is kept in memory until
 * shortly before it expires; concurrent calls share one request for it (single flight); `refused`
 * drops it so the next call fetches another. It is never logged nor written anywhere.
 */
export class ClientCredentials {
  readonly #ep: TokenEndpoint;
  #as: Promise<oauth.AuthorizationServer> | null = null;
  #cached: { token: string; refreshAt: number } | null = null;
  #pending: Promise<string> | null = null;

  constructor(ep: TokenEndpoint) {
    this.#ep = ep;
  }

  token(): Promise<string> {
    const c = this.#cached;
    if (c !== null && this.#ep.now() < c.refreshAt) return Promise.resolve(c.token);
    this.#pending ??= this.#fetch().finally(() => {
      this.#pending = null;
    });
    return this.#pending;
  }

  /** The service answered 401 to `token`: forget it, unless a newer one already replaced it. */
  refused(token: string): void {
    if (this.#cached?.token === token) this.#cached = null;
  }

  async #fetch(): Promise<string> {
    const { name, settings: s, tls } = this.#ep;
    this.#as ??= authorizationServer(name, s, tls).catch((err) => {
      this.#as = null;
      throw err;
    });
    const as = await this.#as;
    const client = await this.#ep.client();
    const auth = await clientAuth(client, s);
    const params: Record<string, string> = {};
    if (s.scope !== undefined) params['scope'] = s.scope;
    if (s.resource !== undefined) params['resource'] = s.resource;
    const started = this.#ep.now();
    const res = await asked(name, as.token_endpoint ?? as.issuer, async () =>
      oauth.processClientCredentialsResponse(
        as,
        { client_id: client.clientId },
        await oauth.clientCredentialsGrantRequest(as, { client_id: client.clientId }, auth, params, requestOptions(tls)),
      ),
    );
    const lifetime = typeof res.expires_in === 'number' ? res.expires_in * 1000 : UNKNOWN_LIFETIME_MS;
    this.#cached = { token: res.access_token, refreshAt: started + lifetime - Math.min(REFRESH_MARGIN_MS, lifetime / 10) };
    return res.access_token;
  }
}

/** client_secret_basic with a secret, private_key_jwt with a key, else the certificate (RFC 8705 §2). */
async function clientAuth(client: OAuthClient, s: IdentitySettings): Promise<oauth.ClientAuth> {
  if (client.clientSecret !== undefined) return oauth.ClientSecretBasic(client.clientSecret);
  if (s.privateKeyFile !== undefined) {
    const key = createPrivateKey(readFileSync(s.privateKeyFile));
    const alg = key.asymmetricKeyType === 'rsa' ? 'RS256' : key.asymmetricKeyType === 'ec' ? 'ES256' : 'EdDSA';
    const pem = key.export({ type: 'pkcs8', format: 'pem' }).toString();
    return oauth.PrivateKeyJwt({ key: await importPKCS8(pem, alg), ...(s.keyId === undefined ? {} : { kid: s.keyId }) });
  }
  return oauth.TlsClientAuth();
}

/**
 * Runs one request to the authorization server and turns its failures into coded errors: the
 * server unreachable, 5xx or 429 may pass (retryable); a refusal of the client will not.
 */
export async function asked<T>(name: string, url: string, request: () => Promise<T>): Promise<T> {
  try {
    return await request();
  } catch (err) {
    if (err instanceof M2mError) throw err;
    if (isTlsRefusal(err) || isTlsRefusal((err as Error).cause)) throw new TlsRefused(name, url, String((err as { code?: string }).code ?? (err as { cause?: { code?: string } }).cause?.code));
    const status = statusOf(err);
    if (status !== undefined && status >= 400 && status < 500 && status !== 429 && status !== 408) {
      const e = oauthError(err);
      throw new ClientRefused(name, e.error === undefined ? `${url} answered ${status}` : `${e.error}${e.error_description ? ` (${e.error_description})` : ''}`, err);
    }
    const detail = status === undefined ? ((err as { code?: string }).code ?? (err as Error).message) : `${url} answered ${status}`;
    throw new TokenUnavailable(name, String(detail), err);
  }
}

function statusOf(err: unknown): number | undefined {
  const e = err as { status?: unknown; cause?: unknown } | null;
  if (typeof e?.status === 'number') return e.status;
  return e?.cause instanceof Response ? e.cause.status : undefined;
}

/** The OAuth `error` of a refusal: in the JSON body, or (a 401) in the WWW-Authenticate challenge. */
function oauthError(err: unknown): { error?: string; error_description?: string } {
  if (err instanceof oauth.WWWAuthenticateChallengeError) return err.cause[0]?.parameters ?? {};
  return err as { error?: string; error_description?: string };
}
