import { existsSync } from 'node:fs';
import { ConfigInvalid } from '../../errors.ts';
import type { HandlerProfile } from '../handlers.ts';

/**
 * The identity variables of a handler profile, `FLOW_HANDLER_<NAME>_<SUFFIX>[__<ENV>]`, and the
 * setting each fills (docs/owning-services.md, How a service authenticates the engine).
 */
export const IDENTITY_VARIABLES = {
  AUTH: 'auth',
  OAUTH_ISSUER: 'issuer',
  OAUTH_TOKEN_ENDPOINT: 'tokenEndpoint',
  OAUTH_CLIENT_ID: 'clientId',
  OAUTH_CLIENT_SECRET: 'clientSecret',
  OAUTH_PRIVATE_KEY_FILE: 'privateKeyFile',
  OAUTH_KEY_ID: 'keyId',
  OAUTH_SCOPE: 'scope',
  OAUTH_RESOURCE: 'resource',
  OAUTH_REGISTER: 'register',
  OAUTH_INITIAL_ACCESS_TOKEN: 'initialAccessToken',
  TLS_CERT_FILE: 'certFile',
  TLS_KEY_FILE: 'keyFile',
  TLS_CA_FILE: 'caFile',
} as const;
export type IdentitySuffix = keyof typeof IDENTITY_VARIABLES;
export type IdentitySettings = Partial<Record<(typeof IDENTITY_VARIABLES)[IdentitySuffix], string>>;

/** `FLOW_HANDLER_PAY_OAUTH_CLIENT_ID__TEAM_A` → `['PAY', 'OAUTH_CLIENT_ID', 'TEAM_A']`; other names → null. */
const IDENTITY_KEY = new RegExp(`${/^FLOW_HANDLER_(.+?)_/.source}(${Object.keys(IDENTITY_VARIABLES).join('|')})${/(?:__(.+))?$/.source}`);
export function parseIdentityKey(key: string): [name: string, suffix: IdentitySuffix, env: string | undefined] | null {
  const m = IDENTITY_KEY.exec(key);
  return m === null ? null : [m[1]!, m[2] as IdentitySuffix, m[3]];
}

/** How an identity authenticates: OAuth client credentials, a client certificate, both, or the static token. */
export function identityKind(s: IdentitySettings): { oauth: boolean; tls: boolean } {
  // AUTH=static wins: an env may keep the static token although the profile uses OAuth
  return { oauth: s.auth !== 'static' && (s.issuer !== undefined || s.tokenEndpoint !== undefined), tls: s.certFile !== undefined };
}

const REGISTER_METHODS = ['tls_client_auth', 'self_signed_tls_client_auth'];

/**
 * Stops boot with FLOW_CONFIG_INVALID naming the variable when a profile's identity (or one env's)
 * is incomplete; in production a profile must use OAuth or a client certificate, or say AUTH=static.
 */
export function checkIdentities(name: string, profile: HandlerProfile, opts: { production: boolean; secretsKey: boolean }): void {
  const scopes: [string, IdentitySettings][] = [['', profile.identity ?? {}]];
  for (const [env, own] of profile.envIdentity ?? []) scopes.push([`__${env}`, { ...profile.identity, ...own }]);
  for (const [suffix, s] of scopes) {
    const v = (k: IdentitySuffix) => `FLOW_HANDLER_${name}_${k}${suffix}`;
    const { oauth, tls } = identityKind(s);
    if (s.auth !== undefined && s.auth !== 'static') throw new ConfigInvalid(v('AUTH'), 'the one value is "static" (OAuth and mTLS are chosen by their own variables)');
    if (opts.production && !oauth && !tls && s.auth !== 'static') {
      throw new ConfigInvalid(v('AUTH'), 'in production a handler needs OAuth client credentials or a client certificate (its OAUTH_* or TLS_* variables), or AUTH=static to keep the static token');
    }
    for (const k of ['OAUTH_ISSUER', 'OAUTH_TOKEN_ENDPOINT', 'OAUTH_RESOURCE'] as const) {
      const url = s[IDENTITY_VARIABLES[k]];
      if (url !== undefined && !/^https:\/\/[^\s]+$/.test(url)) throw new ConfigInvalid(v(k), 'must be an https:// URL');
    }
    for (const k of ['OAUTH_PRIVATE_KEY_FILE', 'TLS_CERT_FILE', 'TLS_KEY_FILE', 'TLS_CA_FILE'] as const) {
      const file = s[IDENTITY_VARIABLES[k]];
      if (file !== undefined && !existsSync(file)) throw new ConfigInvalid(v(k), `no file at ${file}`);
    }
    if (tls && !profile.url.startsWith('https:')) throw new ConfigInvalid(v('TLS_CERT_FILE'), `the service is called over ${profile.url.split(':')[0]}: a client certificate needs an https:// URL`);
    if (tls !== (s.keyFile !== undefined)) throw new ConfigInvalid(v(tls ? 'TLS_KEY_FILE' : 'TLS_CERT_FILE'), 'a client certificate needs both TLS_CERT_FILE and TLS_KEY_FILE');
    if (!oauth) {
      const stray = (['OAUTH_CLIENT_ID', 'OAUTH_CLIENT_SECRET', 'OAUTH_PRIVATE_KEY_FILE', 'OAUTH_REGISTER'] as const).find((k) => s[IDENTITY_VARIABLES[k]] !== undefined);
      if (stray !== undefined && s.auth !== 'static') throw new ConfigInvalid(v('OAUTH_TOKEN_ENDPOINT'), `${v(stray)} is set: set the authorization server too (OAUTH_TOKEN_ENDPOINT or OAUTH_ISSUER)`);
      continue;
    }
    if (s.register !== undefined) {
      if (!REGISTER_METHODS.includes(s.register)) throw new ConfigInvalid(v('OAUTH_REGISTER'), `must be one of ${REGISTER_METHODS.join(', ')}`);
      if (s.issuer === undefined) throw new ConfigInvalid(v('OAUTH_ISSUER'), 'registration finds the registration endpoint by discovery: set the issuer');
      if (!tls) throw new ConfigInvalid(v('TLS_CERT_FILE'), 'registration registers the client certificate: set TLS_CERT_FILE and TLS_KEY_FILE');
      if (!opts.secretsKey) throw new ConfigInvalid('FLOW_SECRETS_KEY', 'a registered client is kept encrypted in Postgres: set a base64 key of 32 bytes');
      continue;
    }
    // a profile whose envs each name their own client may leave its own incomplete: shared defaults
    if (suffix === '' && (profile.envIdentity?.size ?? 0) > 0 && s.clientId === undefined) continue;
    if (s.clientId === undefined) throw new ConfigInvalid(v('OAUTH_CLIENT_ID'), 'OAuth client credentials need a client id (or OAUTH_REGISTER)');
    if (s.clientSecret !== undefined && s.privateKeyFile !== undefined) throw new ConfigInvalid(v('OAUTH_PRIVATE_KEY_FILE'), 'set a client secret or a private key, not both');
    if (s.clientSecret === undefined && s.privateKeyFile === undefined && !tls) {
      throw new ConfigInvalid(v('OAUTH_CLIENT_SECRET'), 'the client authenticates with a secret, a private key (OAUTH_PRIVATE_KEY_FILE) or its certificate (TLS_CERT_FILE)');
    }
  }
}
