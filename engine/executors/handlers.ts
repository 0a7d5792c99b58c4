import { UnknownHandler } from './errors.ts';

/** Where a proxy-back call goes: the owning service's internal API. */
export interface HandlerProfile {
  url: string;
  token?: string;
}

export type HandlerProfiles = ReadonlyMap<string, HandlerProfile>;

/** `payments-api` and `payments.api` both become `PAYMENTS_API`, as in the variable names. */
export function handlerEnvName(name: string): string {
  return name.toUpperCase().replace(/[-.]/g, '_');
}

/**
 * Reads `FLOW_HANDLER_<NAME>_URL` / `FLOW_HANDLER_<NAME>_TOKEN` once, at boot (ARCHITECTURE.md, Contracts: handler profiles).
 * Profiles are keyed by the normalised name so a step may spell its handler either way.
 */
export function loadHandlerProfiles(env: NodeJS.ProcessEnv = process.env, overrides: Record<string, string> = {}): HandlerProfiles {
  const profiles = new Map<string, HandlerProfile>();
  for (const [key, value] of Object.entries(env)) {
    const m = /^FLOW_HANDLER_(.+)_URL$/.exec(key);
    if (m === null || value === undefined || value === '') continue;
    const token = env[`FLOW_HANDLER_${m[1]}_TOKEN`];
    profiles.set(m[1]!, token ? { url: value, token } : { url: value });
  }
  for (const [name, url] of Object.entries(overrides)) {
    const prev = profiles.get(handlerEnvName(name));
    profiles.set(handlerEnvName(name), prev?.token ? { url, token: prev.token } : { url });
  }
  return profiles;
}

export function resolveHandler(profiles: HandlerProfiles, name: string): HandlerProfile {
  const p = profiles.get(handlerEnvName(name));
  if (p === undefined) throw new UnknownHandler(name, `FLOW_HANDLER_${handlerEnvName(name)}_URL`);
  return p;
}
