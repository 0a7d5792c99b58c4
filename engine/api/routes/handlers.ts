import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { EnvParams } from '../../../contracts/api/common.ts';
import { HandlerUsageList, HandlerUsageQuery } from '../../../contracts/api/handlers.ts';
import { grants } from '../../../contracts/scopes.ts';
import type { Engine } from '../../runtime/engine.ts';
import { principalOf } from '../guard.ts';
import { BEARER, PROBLEMS } from './shared.ts';

/** The handler usage report: who still calls a handler profile or path, and may it be turned off now. */
export const handlerRoutes: FastifyPluginAsyncZod<{ engine: Engine }> = async (app, { engine }) => {
  app.get(
    '/v1/envs/:env/handlers',
    {
      config: { scope: 'flow:read' },
      schema: {
        tags: ['logic-versions'],
        summary: 'Every handler profile and path the env’s versions call, with live instances, and whether each may be turned off now',
        security: BEARER,
        params: EnvParams,
        querystring: HandlerUsageQuery,
        response: { 200: HandlerUsageList, ...PROBLEMS },
      },
    },
    async (req) => {
      const who = principalOf(req);
      const { handler, path } = req.query;
      // a read scope narrowed to a glob names only the definitions it matches; the others still count
      return engine.handlerUsage(req.params.env, (logicId) => grants(who.scopes, 'flow:read', logicId), {
        ...(handler === undefined ? {} : { handler }),
        ...(path === undefined ? {} : { path }),
      });
    },
  );
};
