import { type FlowScope, grants } from '../contracts/scopes.ts';

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
