import type https from 'node:https';
import { ClientRefused, RegistrationFailed } from '../errors.ts';
import { authorizationFor, envVarName, type HandlerProfile, type HandlerProfiles, handlerEnvName } from '../handlers.ts';
import { ClientCredentials, type OAuthClient } from './client-credentials.ts';
import { type RegistrationStore, registeredClient } from './registration.ts';
import { identityKind, type IdentitySettings } from './settings.ts';
import { type ClientTls, loadTls } from './tls.ts';

/** What a call to a handler carries: its Authorization header, and the TLS agent presenting its certificate. */
export interface Credential {
  headers: Record<string, string>;
  agent?: https.Agent;
  /** The access token in `headers` when it came from OAuth: what `refused` forgets. */
  token?: string;
}

/** The identity the proxy executor asks before each call to a handler, on behalf of one env. */
export interface TokenSource {
  /** Names the identity in errors and logs (`PAY`, `PAY__TEAM_A`); never a secret. */
  readonly name: string;
  credential(): Promise<Credential>;
  /** The service answered 401 to this credential: the next `credential()` fetches a new token. */
  refused(c: Credential): void;
}

export interface IdentityOptions {
  /** Keeps registered clients in Postgres for every node (the Engine passes its store's). (Default: none: registration fails) */
  registrations?: RegistrationStore;
  /** FLOW_SECRETS_KEY: seals kept registrations (32 bytes). */
  secretsKey?: Buffer;
  /** The clock a cached token's expiry is read on; tests move it. (Default: Date.now) */
  now?: () => number;
}

/**
 * The identities of every handler profile, per env: one token source per identity key, made the
 * first time a call needs it and shared by every call after (so its token cache is too).
 */
export class Identities {
  readonly #profiles: HandlerProfiles;
  readonly #opts: IdentityOptions;
  readonly #sources = new Map<string, TokenSource>();

  constructor(profiles: HandlerProfiles, opts: IdentityOptions = {}) {
    this.#profiles = profiles;
    this.#opts = opts;
  }

  /** The identity calls to `handler` on behalf of `env` use. The handler must have a profile. */
  for(handler: string, profile: HandlerProfile, env: string): TokenSource {
    const { key, settings } = identityFor(handler, profile, env);
    const { oauth } = identityKind(settings);
    // static tokens may differ per env without the identity doing so: keyed by env too
    const cacheKey = oauth ? key : `${key}\0${envVarName(env)}`;
    let source = this.#sources.get(cacheKey);
    if (source === undefined) {
      source = oauth ? this.#oauth(key, settings) : staticSource(key, profile, env, this.#tls(key, settings));
      this.#sources.set(cacheKey, source);
    }
    return source;
  }

  /**
   * Registers (or reads the kept registration of) every identity with OAUTH_REGISTER, so a
   * misconfigured one stops boot rather than failing its first step. Run at boot, after migrate.
   */
  async prepare(): Promise<void> {
    for (const [name, profile] of this.#profiles) {
      const envs = [null, ...(profile.envIdentity?.keys() ?? [])];
      for (const env of envs) {
        const { key, settings } = env === null ? { key: name, settings: profile.identity ?? {} } : { key: `${name}__${env}`, settings: { ...profile.identity, ...profile.envIdentity!.get(env) } };
        if (settings.register !== undefined) await this.#client(key, settings)();
      }
    }
  }

  /** Closes the identities' kept-alive connections (their TLS agents); tokens are dropped with them. */
  close(): void {
    for (const tls of this.#tlsByKey.values()) tls?.agent.destroy();
    this.#tlsByKey.clear();
    this.#sources.clear();
  }
  readonly #tlsByKey = new Map<string, ClientTls | undefined>();

  /** The identity's certificate and agent, read once per identity (every env sharing it shares its connections). */
  #tls(key: string, settings: IdentitySettings): ClientTls | undefined {
    if (!this.#tlsByKey.has(key)) this.#tlsByKey.set(key, loadTls(settings));
    return this.#tlsByKey.get(key);
  }

  #oauth(key: string, settings: IdentitySettings): TokenSource {
    const tls = this.#tls(key, settings);
    const cc = new ClientCredentials({ name: key, settings, tls, client: this.#client(key, settings), now: this.#opts.now ?? Date.now });
    const agent = tls === undefined ? {} : { agent: tls.agent };
    return {
      name: key,
      credential: async () => {
        const token = await cc.token();
        return { headers: { authorization: `Bearer ${token}` }, token, ...agent };
      },
      refused: (c) => {
        if (c.token !== undefined) cc.refused(c.token);
      },
    };
  }

  /** The client id (and secret) an identity authenticates with: configured, or registered once and kept. */
  #client(key: string, s: IdentitySettings): () => Promise<OAuthClient> {
    if (s.register === undefined) {
      if (s.clientId === undefined) return () => Promise.reject(new ClientRefused(key, 'no client id is configured for this env: set the handler’s OAUTH_CLIENT_ID__<ENV>'));
      const client: OAuthClient = { clientId: s.clientId!, ...(s.clientSecret === undefined ? {} : { clientSecret: s.clientSecret }) };
      return async () => client;
    }
    const memo = `client\0${key}`;
    return () => {
      const known = this.#clients.get(memo);
      if (known !== undefined) return known;
      const { registrations, secretsKey } = this.#opts;
      const made = (
        registrations === undefined || secretsKey === undefined
          ? Promise.reject(new RegistrationFailed(key, 'this engine has no store or no FLOW_SECRETS_KEY to keep a registration in'))
          : registeredClient(key, s, this.#tls(key, s)!, registrations, secretsKey)
      ).catch((err) => {
        this.#clients.delete(memo);
        throw err;
      });
      this.#clients.set(memo, made);
      return made;
    };
  }
  readonly #clients = new Map<string, Promise<OAuthClient>>();
}

/** A profile without OAuth: its static token (the env's, else the profile's), over its certificate if it has one. */
function staticSource(key: string, profile: HandlerProfile, env: string, tls: ClientTls | undefined): TokenSource {
  const credential: Credential = { headers: authorizationFor(profile, env), ...(tls === undefined ? {} : { agent: tls.agent }) };
  return { name: key, credential: async () => credential, refused: () => {} };
}

/**
 * The identity a call on behalf of `env` uses: the profile's settings with the env's own on top.
 * `key` names it (`PAY`, or `PAY__TEAM_A` when the env sets any identity variable of its own):
 * tokens are cached and registrations kept per key, so each env's calls carry its own.
 */
export function identityFor(handler: string, profile: HandlerProfile, env: string): { key: string; settings: IdentitySettings } {
  const base = handlerEnvName(handler);
  const own = profile.envIdentity?.get(envVarName(env));
  return own === undefined ? { key: base, settings: profile.identity ?? {} } : { key: `${base}__${envVarName(env)}`, settings: { ...profile.identity, ...own } };
}
