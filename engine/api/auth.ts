import { webcrypto } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createLocalJWKSet, createRemoteJWKSet, type JWTPayload, type JWTVerifyGetKey, jwtVerify } from 'jose';
import { z } from 'zod';
import { parseScopes } from '../../contracts/scopes.ts';
import { ConfigInvalid } from '../errors.ts';
import { AuthKeysUnavailable, AuthUnconfigured, TokenExpired, TokenInvalid, Unauthenticated } from './errors.ts';

/** Who a verified token says is calling (claims: ARCHITECTURE.md, Contracts: HTTP API). */
export interface Principal {
  /** `sub`: the actor written to every audit row. */
  subject: string;
  /** `envs`: the environments it may act in; `["*"]` is every one. */
  envs: string[];
  /** `scope`, split on spaces. */
  scopes: string[];
  /** `exp` in ms since the epoch, when the token has one: a long-lived answer (a /live stream) ends then. */
  expiresAt?: number;
}

export interface AuthOptions {
  /** HS256 key (FLOW_AUTH_SECRET); refused in production, where tokens are verified against a JWKS. */
  secret?: string | undefined;
  /** A JWKS: an http(s) URL (fetched and cached) or a file path (FLOW_AUTH_JWKS_URL). */
  jwks?: string | undefined;
  /** The `iss` every token verified against the JWKS must carry (FLOW_AUTH_ISSUER); required with a JWKS. */
  issuer?: string | undefined;
  /** The `aud` every token verified against the JWKS must name (FLOW_AUTH_AUDIENCE); required with a JWKS. */
  audience?: string | undefined;
  /** Production verifies only against the JWKS and requires `exp`. */
  production: boolean;
}

/** Verifies an `Authorization` header value into a Principal, or throws a 401 FlowError. */
export type Authenticate = (authorization: string | undefined) => Promise<Principal>;

const Claims = z.object({
  sub: z.string().min(1),
  envs: z.array(z.string().min(1)).min(1),
  scope: z.string(),
});

/** The asymmetric algorithms a JWKS may carry; HS256 only ever in development. */
const JWKS_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'];

/**
 * How long a verified token is taken on trust without checking its signature again (its `exp` is
 * checked on every request all the same). A caller sends the same token with every request, and
 * the signature check (a WebCrypto job, or an RSA/EC verify against a JWKS) was the largest cost
 * of an API start beyond the start itself. The price: a key withdrawn from the JWKS stops
 * accepting tokens it signed up to this much later — less than jose's own JWKS cache already
 * keeps a withdrawn key (cacheMaxAge, 10 minutes).
 */
const TRUSTED_MS = 60_000;
/** Tokens kept at most; the oldest goes first. */
const TRUSTED_MAX = 1024;

/**
 * Refuses a JWKS setting that would take tokens minted for someone else: without an issuer and an
 * audience, any token the identity provider signs (for any client) would be accepted; over plain
 * http in production, anyone on the path could swap the keys. A file path is read as it is.
 */
export function checkJwksSettings(opts: Pick<AuthOptions, 'jwks' | 'issuer' | 'audience' | 'production'>): void {
  if (opts.jwks === undefined || opts.jwks === '') return;
  if (opts.issuer === undefined || opts.issuer === '') throw new ConfigInvalid('FLOW_AUTH_ISSUER', 'required with FLOW_AUTH_JWKS_URL: the `iss` every token must carry');
  if (opts.audience === undefined || opts.audience === '') throw new ConfigInvalid('FLOW_AUTH_AUDIENCE', 'required with FLOW_AUTH_JWKS_URL: the `aud` every token must name');
  if (opts.production && /^http:\/\//i.test(opts.jwks)) throw new ConfigInvalid('FLOW_AUTH_JWKS_URL', 'must be an https URL (or a file path) in production');
}

export function createAuthenticator(opts: AuthOptions): Authenticate {
  checkJwksSettings(opts);
  const { key, algorithms } = verificationKey(opts);
  const requiredClaims = opts.production ? ['sub', 'exp'] : ['sub'];
  const jwks = opts.jwks !== undefined && opts.jwks !== '';
  const expected = jwks ? { issuer: opts.issuer as string, audience: opts.audience as string } : {};
  const trusted = new Map<string, { principal: Principal; exp: number | undefined; until: number }>();
  return async (authorization) => {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
    if (m === null) throw new Unauthenticated();
    const jwt = m[1]!;
    const now = Date.now();
    const seen = trusted.get(jwt);
    if (seen !== undefined && now < seen.until) {
      // as jose counts: expired once exp is not after the current whole second
      if (seen.exp !== undefined && seen.exp <= Math.floor(now / 1000)) throw new TokenExpired();
      return seen.principal;
    }
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(jwt, (await key) as JWTVerifyGetKey, { algorithms, requiredClaims, ...expected }));
    } catch (err) {
      throw refusal(err);
    }
    const claims = Claims.safeParse(payload);
    if (!claims.success) throw new TokenInvalid('it needs the claims sub (a string), envs (an array of env ids) and scope (a string)');
    // frozen: one principal now answers many requests
    const principal: Principal = Object.freeze({
      subject: claims.data.sub,
      envs: Object.freeze(claims.data.envs) as string[],
      scopes: Object.freeze(parseScopes(claims.data.scope)) as string[],
      ...(payload.exp === undefined ? {} : { expiresAt: payload.exp * 1000 }),
    });
    trusted.delete(jwt);
    if (trusted.size >= TRUSTED_MAX) trusted.delete(trusted.keys().next().value!);
    trusted.set(jwt, { principal, exp: payload.exp, until: now + TRUSTED_MS });
    return principal;
  };
}

function verificationKey(opts: AuthOptions): { key: JWTVerifyGetKey | Promise<webcrypto.CryptoKey>; algorithms: string[] } {
  if (opts.jwks !== undefined && opts.jwks !== '') {
    const key = /^https?:\/\//i.test(opts.jwks)
      ? createRemoteJWKSet(new URL(opts.jwks))
      : createLocalJWKSet(JSON.parse(readFileSync(opts.jwks, 'utf8')));
    return { key, algorithms: JWKS_ALGORITHMS };
  }
  if (opts.production || opts.secret === undefined || opts.secret === '') throw new AuthUnconfigured();
  // a WebCrypto key imported once: given raw bytes or a node KeyObject, jose converts it again on
  // every request (measured: ~100 µs of CPU a verify with a KeyObject, ~30 with this)
  const raw = new TextEncoder().encode(opts.secret);
  return { key: webcrypto.subtle.importKey('raw', raw, { name: 'HMAC', hash: 'SHA-256' }, false, ['verify']), algorithms: ['HS256'] };
}

/** jose's stable error codes to ours: expired, keys unreachable, anything else invalid. */
function refusal(err: unknown): Error {
  const code = (err as { code?: string }).code;
  if (code === 'ERR_JWT_EXPIRED') return new TokenExpired();
  if (code === 'ERR_JWKS_TIMEOUT' || (code === undefined && err instanceof TypeError)) return new AuthKeysUnavailable((err as Error).message);
  return new TokenInvalid(code === 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED' ? 'bad signature' : (err as Error).message);
}
