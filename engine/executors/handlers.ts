import type { HandlerServes } from '../../contracts/grants.ts';
import { ConfigInvalid } from '../errors.ts';
import { UnknownHandler } from './errors.ts';
import { type IdentitySettings, IDENTITY_VARIABLES, parseIdentityKey } from './m2m/settings.ts';

/** Where a proxy-back call goes: the owning service's internal API. */
export interface HandlerProfile {
  url: string;
  /** Sent as `Authorization: Bearer` when no per-env token applies. */
  token?: string;
  /**
   * Tokens for calls made on behalf of one env's instances, keyed by `envVarName(env)` — so each
   * tenant's calls carry that tenant's credential (`FLOW_HANDLER_<NAME>_TOKEN__<ENV>`).
   */
  envTokens?: ReadonlyMap<string, string>;
  /**
   * The logicId globs whose versions may call this handler although their publisher's publish
   * scope is narrowed (`FLOW_HANDLER_<NAME>_SERVES`, comma- or space-separated). Unset: only
   * versions of un-narrowed publishers (ARCHITECTURE.md, Invariants: a version can do no more
   * than its publisher).
   */
  serves?: readonly string[];
  /** Per-env `FLOW_HANDLER_<NAME>_SERVES__<ENV>`, keyed by `envVarName(env)`; replaces `serves` in that env. */
  envServes?: ReadonlyMap<string, readonly string[]>;
  /**
   * How the engine proves who it is to the service: OAuth client credentials, a client
   * certificate, registration (`FLOW_HANDLER_<NAME>_OAUTH_*`, `_TLS_*`, `_AUTH`; engine/executors/m2m).
   */
  identity?: IdentitySettings;
  /** Per-env identity variables (`…__<ENV>`), keyed by `envVarName(env)`; each overrides the profile's. */
  envIdentity?: ReadonlyMap<string, IdentitySettings>;
  /**
   * Calls to this handler from every env at once (`FLOW_HANDLER_<NAME>_CONCURRENCY`, `_RATE` per
   * second, `_BURST`; engine/runtime/permits.ts). Unset: unlimited.
   */
  limit?: HandlerLimit;
  /** Per-env `FLOW_HANDLER_<NAME>_CONCURRENCY__<ENV>` (…`_RATE__`, `_BURST__`), keyed by `envVarName(env)`: a further limit on that env's calls. */
  envLimits?: ReadonlyMap<string, HandlerLimit>;
}

/** A handler's limit as configured: calls in flight, and a token bucket (per second, with a burst; Default burst: 1). */
export interface HandlerLimit {
  concurrency: number | null;
  rate: number | null;
  burst: number | null;
}

const LIMIT_FIELDS = { CONCURRENCY: 'concurrency', RATE: 'rate', BURST: 'burst' } as const;

export type HandlerProfiles = ReadonlyMap<string, HandlerProfile>;

/** `payments-api` and `payments.api` both become `PAYMENTS_API`, as in the variable names. */
export function handlerEnvName(name: string): string {
  return name.toUpperCase().replace(/[-.]/g, '_');
}

/** An env id as it appears in a variable name: upper-cased, `-` and `.` → `_` (as handler names). */
export const envVarName = handlerEnvName;

/** `"team-a.*, shared.audit"` → `['team-a.*', 'shared.audit']`. */
export function parseServes(value: string): string[] {
  return value.split(/[\s,]+/).filter((g) => g !== '');
}

/**
 * Reads `FLOW_HANDLER_<NAME>_URL`, `FLOW_HANDLER_<NAME>_TOKEN`, `FLOW_HANDLER_<NAME>_SERVES`, the
 * identity variables (`IDENTITY_VARIABLES`) and the per-env `…__<ENV>` of each but the URL once, at
 * boot (ARCHITECTURE.md, Contracts: handler profiles).
 * Profiles are keyed by the normalised name so a step may spell its handler either way.
 * `overrides` (name → URL) replace the URL and keep the tokens.
 */
export function loadHandlerProfiles(env: NodeJS.ProcessEnv = process.env, overrides: Record<string, string> = {}): HandlerProfiles {
  const urls = new Map<string, string>();
  const tokens = new Map<string, string>();
  const envTokens = new Map<string, Map<string, string>>();
  const serves = new Map<string, string[]>();
  const envServes = new Map<string, Map<string, string[]>>();
  const identity = new Map<string, IdentitySettings>();
  const envIdentity = new Map<string, Map<string, IdentitySettings>>();
  /** `<NAME>` → `''` (every env) or `<ENV>` → the limit's raw fields. */
  const limits = new Map<string, Map<string, Record<string, string>>>();
  for (const [key, value] of Object.entries(env)) {
    if (value === undefined || value === '') continue;
    // first: `_OAUTH_INITIAL_ACCESS_TOKEN` must not read as a `_TOKEN`
    const id = parseIdentityKey(key);
    if (id !== null) {
      const [name, suffix, e] = id;
      const field = IDENTITY_VARIABLES[suffix];
      if (e === undefined) identity.set(name, { ...identity.get(name), [field]: value });
      else {
        const perEnv = envIdentity.get(name) ?? new Map<string, IdentitySettings>();
        perEnv.set(e, { ...perEnv.get(e), [field]: value });
        envIdentity.set(name, perEnv);
      }
      continue;
    }
    const limit = /^FLOW_HANDLER_(.+)_(CONCURRENCY|RATE|BURST)(?:__(.+))?$/.exec(key);
    if (limit !== null) {
      const perName = limits.get(limit[1]!) ?? new Map<string, Record<string, string>>();
      perName.set(limit[3] ?? '', { ...perName.get(limit[3] ?? ''), [limit[2]!]: value });
      limits.set(limit[1]!, perName);
      continue;
    }
    const servesPerEnv = /^FLOW_HANDLER_(.+)_SERVES__(.+)$/.exec(key);
    const servesAll = /^FLOW_HANDLER_(.+)_SERVES$/.exec(key);
    if (servesPerEnv !== null) {
      envServes.set(servesPerEnv[1]!, new Map([...(envServes.get(servesPerEnv[1]!) ?? []), [servesPerEnv[2]!, parseServes(value)]]));
      continue;
    }
    if (servesAll !== null) {
      serves.set(servesAll[1]!, parseServes(value));
      continue;
    }
    const perEnv = /^FLOW_HANDLER_(.+)_TOKEN__(.+)$/.exec(key);
    const url = /^FLOW_HANDLER_(.+)_URL$/.exec(key);
    const token = /^FLOW_HANDLER_(.+)_TOKEN$/.exec(key);
    if (perEnv !== null) envTokens.set(perEnv[1]!, new Map([...(envTokens.get(perEnv[1]!) ?? []), [perEnv[2]!, value]]));
    else if (url !== null) urls.set(url[1]!, value);
    else if (token !== null) tokens.set(token[1]!, value);
  }
  for (const [name, url] of Object.entries(overrides)) urls.set(handlerEnvName(name), url);
  const profiles = new Map<string, HandlerProfile>();
  for (const [name, url] of urls) {
    const token = tokens.get(name);
    const perEnv = envTokens.get(name);
    const globs = serves.get(name);
    const perEnvGlobs = envServes.get(name);
    const ownIdentity = identity.get(name);
    const perEnvIdentity = envIdentity.get(name);
    const raw = limits.get(name) ?? new Map<string, Record<string, string>>();
    const all = raw.get('');
    const perEnvLimits = new Map([...raw].filter(([e]) => e !== '').map(([e, f]) => [e, handlerLimit(name, `__${e}`, f)]));
    profiles.set(name, {
      ...(all === undefined ? {} : { limit: handlerLimit(name, '', all) }),
      ...(perEnvLimits.size === 0 ? {} : { envLimits: perEnvLimits }),
      url,
      ...(token ? { token } : {}),
      ...(perEnv ? { envTokens: perEnv } : {}),
      ...(globs ? { serves: globs } : {}),
      ...(perEnvGlobs ? { envServes: perEnvGlobs } : {}),
      ...(ownIdentity ? { identity: ownIdentity } : {}),
      ...(perEnvIdentity ? { envIdentity: perEnvIdentity } : {}),
    });
  }
  return profiles;
}

/** A limit's fields from its variables; a value that is not a positive number stops boot (FLOW_CONFIG_INVALID). */
function handlerLimit(name: string, suffix: string, raw: Record<string, string>): HandlerLimit {
  const limit: HandlerLimit = { concurrency: null, rate: null, burst: null };
  for (const [field, key] of Object.entries(LIMIT_FIELDS)) {
    const value = raw[field];
    if (value === undefined) continue;
    const n = Number(value);
    const whole = field !== 'RATE';
    if (!Number.isFinite(n) || n <= 0 || (whole && !Number.isInteger(n))) {
      throw new ConfigInvalid(`FLOW_HANDLER_${name}_${field}${suffix}`, whole ? 'must be a whole number ≥ 1' : 'must be a number > 0 (calls per second)');
    }
    limit[key] = n;
  }
  return limit;
}

export function resolveHandler(profiles: HandlerProfiles, name: string): HandlerProfile {
  const p = profiles.get(handlerEnvName(name));
  if (p === undefined) throw new UnknownHandler(name, `FLOW_HANDLER_${handlerEnvName(name)}_URL`);
  return p;
}

/** The `Authorization` header for a call on behalf of an instance of `env`: its env's token, else the profile's. */
export function authorizationFor(profile: HandlerProfile, env: string): Record<string, string> {
  const token = profile.envTokens?.get(envVarName(env)) ?? profile.token;
  return token ? { authorization: `Bearer ${token}` } : {};
}

/**
 * What each handler serves in `env`, for the grant rule (contracts/grants.ts): the per-env globs,
 * else the profile's. A handler without a profile serves nothing.
 */
export function servesIn(profiles: HandlerProfiles, env: string): (handler: string) => HandlerServes {
  return (handler) => {
    const name = handlerEnvName(handler);
    const p = profiles.get(name);
    const perEnv = p?.envServes?.get(envVarName(env));
    if (perEnv !== undefined) return { variable: `FLOW_HANDLER_${name}_SERVES__${envVarName(env)}`, globs: perEnv };
    return { variable: `FLOW_HANDLER_${name}_SERVES`, globs: p?.serves };
  };
}
