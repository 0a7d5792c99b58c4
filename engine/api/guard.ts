import type { FastifyInstance, FastifyRequest } from 'fastify';
import { type FlowScope, grants, grantsEnv, mayHold } from '../../contracts/scopes.ts';
import { ScopeMissing } from '../errors.ts';
import type { Authenticate, Principal } from './auth.ts';
import { EnvForbidden } from './errors.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The scope the route needs, checked here only for being held in some form: a scope narrowed
     * to a logicId glob is checked again where the definition is known. `null`: no token at all
     * (health, metrics, callbacks — the resume token authenticates those).
     */
    scope?: FlowScope | null;
  }
  interface FastifyRequest {
    principal: Principal | null;
  }
}

/**
 * Authentication and tenancy at the edge, before the body is even read: a bearer token (401),
 * the env in the path granted by its `envs` (403), and the route's scope held at all (403).
 * Log lines of the request carry the env and, where the path names one, the workflow id.
 */
export function installGuard(app: FastifyInstance, authenticate: Authenticate): void {
  app.decorateRequest('principal', null);
  // a route of an env that forgot to say its scope would be open to anyone: refuse to start
  app.addHook('onRoute', (route) => {
    if (route.url.startsWith('/v1/envs/') && typeof route.config?.scope !== 'string') throw new Error(`route ${route.url} declares no scope`);
  });
  app.addHook('onRequest', async (req) => {
    const params = req.params as { env?: string; id?: string };
    const context: Record<string, string> = {};
    if (params.env !== undefined) context['env'] = params.env;
    if (params.id !== undefined) context['workflowId'] = params.id;
    if (Object.keys(context).length > 0) req.log = req.log.child(context);

    const scope = req.routeOptions.config.scope;
    if (scope === null || scope === undefined) return;
    const principal = await authenticate(req.headers.authorization);
    req.principal = principal;
    if (params.env !== undefined && !grantsEnv(principal.envs, params.env)) throw new EnvForbidden(principal.subject, params.env);
    if (!mayHold(principal.scopes, scope)) throw new ScopeMissing(principal.subject, scope, `${req.method} ${req.routeOptions.url}`);
  });
}

/** The verified caller of a guarded route. */
export function principalOf(req: FastifyRequest): Principal {
  if (req.principal === null) throw new Error(`route ${req.routeOptions.url} reads a principal but is not guarded`);
  return req.principal;
}

/** Refuses unless the caller holds `scope` for this definition (a glob-narrowed scope must match it). */
export function requireScope(who: Principal, scope: FlowScope, logicId: string | undefined, what: string): void {
  if (!grants(who.scopes, scope, logicId)) throw new ScopeMissing(who.subject, scope, what);
}
