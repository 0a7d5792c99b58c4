import { type FlowScope, grants, grantsEnv } from '../contracts/scopes.ts';

/**
 * What the signed-in token allows, read from its claims so buttons can say which scope they lack.
 * The server decides; this only explains, with the same rules (contracts/scopes.ts).
 */
export interface Claims {
  sub: string;
  envs: string[];
  scopes: string[];
}

export function decodeClaims(token: string): Claims | null {
  try {
    const part = token.split('.')[1] ?? '';
    const c = JSON.parse(atob(part.replace(/-/g, '+').replace(/_/g, '/')));
    return { sub: String(c.sub ?? '?'), envs: Array.isArray(c.envs) ? c.envs : [], scopes: String(c.scope ?? '').split(/\s+/).filter(Boolean) };
  } catch {
    return null;
  }
}

/** The title a disabled button shows (naming the missing scope), or null when it is allowed. */
export function missing(claims: Claims | null, scope: FlowScope, logicId?: string): string | null {
  if (claims !== null && grants(claims.scopes, scope, logicId)) return null;
  return `needs scope ${scope}${logicId ? ` for ${logicId}` : ''}`;
}

/**
 * The env the console opens on: the URL's `?env=` (shared links name it); else the env last picked,
 * while the token still grants it; else the server's default if the token grants it (a `*` token
 * does); else the first env the token names. A tenant's token so lands on its own env.
 */
export function chooseEnv(claims: Claims | null, o: { server: string; url?: string | null; picked?: string | null }): string {
  if (o.url) return o.url;
  const envs = claims?.envs ?? [];
  if (o.picked && grantsEnv(envs, o.picked)) return o.picked;
  if (claims === null || grantsEnv(envs, o.server)) return o.server;
  return envs[0] ?? o.server;
}

/** The envs the picker offers: the current one, then every env the token names (`*` names none). */
export function envChoices(claims: Claims | null, current: string): string[] {
  return [...new Set([current, ...(claims?.envs ?? []).filter((e) => e !== '*')])];
}
