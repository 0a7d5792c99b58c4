import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import {
  DeleteLimitBody,
  LimitList,
  LimitParams,
  LimitScopeParams,
  LimitWaiterList,
  LimitWaitersQuery,
  PutLimitBody,
} from '../../../contracts/api/limits.ts';
import type { Engine } from '../../runtime/engine.ts';
import { type LimitState, EVERY_ENV } from '../../runtime/permits.ts';
import { LimitScopeInvalid } from '../../errors.ts';
import { listWaiters } from '../../store/permits.ts';
import { inEnv } from '../../store/tx.ts';
import { principalOf, requireScope } from '../guard.ts';
import { BEARER, PROBLEMS } from './shared.ts';

const iso = (d: Date | null) => (d === null ? null : d.toISOString());
/** A limit as the API answers it. */
export const limitInfo = (l: LimitState) => ({ ...l, updatedAt: iso(l.updatedAt) });
const info = limitInfo;

/** A per-key resource names its definition: an admin scope narrowed to it may change its limit. */
const logicIdOf = (resource: string) => (resource.startsWith('key:') ? resource.split(':')[1] : undefined);

/**
 * Limits (engine/runtime/permits.ts): the ones in force for an env with their load, the instances
 * waiting for a permit and why, and changing a limit at runtime (`flow:admin`, audited). The path's
 * env `*` addresses the limits on every env's calls at once; the guard then asks for a token whose
 * `envs` is `["*"]`.
 */
export const limitRoutes: FastifyPluginAsyncZod<{ engine: Engine }> = async (app, { engine }) => {
  app.get(
    '/v1/envs/:env/limits',
    {
      config: { scope: 'flow:read' },
      schema: { tags: ['limits'], summary: 'The limits in force for the env (its own and every env’s), with permits held and instances waiting', security: BEARER, params: LimitScopeParams, response: { 200: LimitList, ...PROBLEMS } },
    },
    async (req) => {
      requireScope(principalOf(req), 'flow:read', undefined, 'the limits');
      return { items: (await engine.permits.list(req.params.env)).map(info) };
    },
  );

  app.get(
    '/v1/envs/:env/limits/waiting',
    {
      config: { scope: 'flow:read' },
      schema: { tags: ['limits'], summary: 'Instances of the env waiting for a permit, oldest first, and on what', security: BEARER, params: LimitScopeParams, querystring: LimitWaitersQuery, response: { 200: LimitWaiterList, ...PROBLEMS } },
    },
    async (req) => {
      requireScope(principalOf(req), 'flow:read', undefined, 'the instances waiting for a permit');
      if (req.params.env === EVERY_ENV) throw new LimitScopeInvalid('waiting instances are listed per env');
      const rows = await inEnv(engine.db, req.params.env, (c) => listWaiters(c, { env: req.params.env, ...(req.query.resource ? { resource: req.query.resource } : {}), limit: 500 }));
      return { items: rows.map((w) => ({ ...w, dueAt: iso(w.dueAt), since: w.since.toISOString() })) };
    },
  );

  app.put(
    '/v1/envs/:env/limits/:resource',
    {
      config: { scope: 'flow:admin' },
      schema: { tags: ['limits'], summary: 'Sets a limit, replacing configuration; applied at once to the work waiting on it (audited)', security: BEARER, params: LimitParams, body: PutLimitBody, response: { 200: LimitList, ...PROBLEMS } },
    },
    async (req) => {
      const { env, resource } = req.params;
      const who = principalOf(req);
      requireScope(who, 'flow:admin', logicIdOf(resource), `the limit ${resource}`);
      if (env === EVERY_ENV && resource.startsWith('key:')) throw new LimitScopeInvalid('a per-key limit belongs to one env: put it under that env');
      const { concurrency, rate, burst, reason } = req.body;
      await engine.permits.set({ scope: env, resource, limit: { concurrency, rate, burst: burst ?? null }, actor: who.subject, reason });
      return { items: (await engine.permits.list(env)).filter((l) => l.scope === env && l.resource === resource).map(info) };
    },
  );

  app.delete(
    '/v1/envs/:env/limits/:resource',
    {
      config: { scope: 'flow:admin' },
      schema: { tags: ['limits'], summary: 'Removes a limit set through the API: configuration applies again (audited)', security: BEARER, params: LimitParams, body: DeleteLimitBody, response: { 200: LimitList, ...PROBLEMS } },
    },
    async (req) => {
      const { env, resource } = req.params;
      const who = principalOf(req);
      requireScope(who, 'flow:admin', logicIdOf(resource), `the limit ${resource}`);
      await engine.permits.set({ scope: env, resource, limit: null, actor: who.subject, reason: req.body.reason });
      return { items: (await engine.permits.list(env)).filter((l) => l.scope === env && l.resource === resource).map(info) };
    },
  );
};
