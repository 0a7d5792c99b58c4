/**
 * Scopes of the HTTP API (ARCHITECTURE.md, Contracts: HTTP API), as pure functions so the engine, the console and the CLI
 * decide the same way.
 *
 * A token's `scope` claim is space-separated. `flow:<verb>` grants the verb on every definition;
 * `flow:<verb>:<glob>` narrows it to the logicIds the glob matches (`*` is any run of characters),
 * as in `flow:repair:payments.*`. `flow:admin` (or `flow:admin:<glob>`) holds every flow scope.
 * `flow:events:<glob>` is the one scope whose glob matches event types, not logicIds: posting
 * such events, and publishing a version with a trigger on them.
 * `flow:migrate` moves instances to a later version of their definition; its glob must match the
 * definition of both versions (they share their logicId).
 * `flow:signal` delivers messages to running instances (`POST …/workflows/{id}/messages/{name}`).
 * `flow:erase` tombstones an ended instance's data (erasure); it is never implied by a verb scope.
 * `flow:metrics` reads GET /metrics, which spans every env and definition: it is never narrowed.
 */

export const FLOW_SCOPES = [
  'flow:read',
  'flow:start',
  'flow:publish',
  'flow:decide',
  'flow:signal',
  'flow:retry',
  'flow:repair',
  'flow:cancel',
  'flow:force-complete',
  'flow:replay',
  'flow:migrate',
  'flow:erase',
  'flow:events',
  'flow:metrics',
  'flow:admin',
] as const;
export type FlowScope = (typeof FLOW_SCOPES)[number];

export const ADMIN_SCOPE: FlowScope = 'flow:admin';

/** `"flow:read  flow:start"` → `['flow:read', 'flow:start']`. */
export function parseScopes(claim: string | undefined | null): string[] {
  return (claim ?? '').split(/\s+/).filter((s) => s !== '');
}

/** A logicId glob as a regular expression: `*` is any run of characters, everything else literal. */
export function globToRegExp(glob: string): RegExp {
  return new RegExp(`^${glob.split('*').map((part) => part.replace(/[.*+?^${}()|[\]\\-]/g, '\\$&')).join('.*')}$`);
}

/** What one granted scope says about `wanted`: not at all, for every definition, or for a glob. */
function grantOf(granted: string, wanted: FlowScope): { all: true } | { glob: string } | null {
  for (const base of wanted === ADMIN_SCOPE ? [ADMIN_SCOPE] : [wanted, ADMIN_SCOPE]) {
    if (granted === base) return { all: true };
    if (granted.startsWith(`${base}:`)) return { glob: granted.slice(base.length + 1) };
  }
  return null;
}

/**
 * True when `scopes` grant `wanted` for `logicId`. Without a logicId (a listing over every
 * definition, an event whose starts are not known yet) only an un-narrowed grant counts.
 */
export function grants(scopes: readonly string[], wanted: FlowScope, logicId?: string): boolean {
  return scopes.some((s) => {
    const g = grantOf(s, wanted);
    if (g === null) return false;
    if ('all' in g) return true;
    return logicId !== undefined && globToRegExp(g.glob).test(logicId);
  });
}

/** True when `scopes` grant `wanted` for at least some definition: the cheap check before a lookup. */
export function mayHold(scopes: readonly string[], wanted: FlowScope): boolean {
  return scopes.some((s) => grantOf(s, wanted) !== null);
}

/** True when the token's `envs` claim grants `env` (`["*"]` grants every env). */
export function grantsEnv(envs: readonly string[], env: string): boolean {
  return envs.includes('*') || envs.includes(env);
}
