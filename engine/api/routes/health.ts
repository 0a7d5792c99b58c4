import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { Health, Ready } from '../../../contracts/api/health.ts';
import type { Engine } from '../../runtime/engine.ts';
import { EnvForbidden, NotReady } from '../errors.ts';
import { principalOf, requireScope } from '../guard.ts';
import { BEARER, PROBLEMS } from './shared.ts';

const ALL_ENVS = '*';

export interface HealthOptions {
  engine: Engine;
  /** False once shutdown began, so load balancers stop sending before the listener closes. */
  accepting: () => boolean;
  /** /metrics without a token; else it takes an un-narrowed `flow:metrics` for every env. */
  metricsOpen: boolean;
}

/** Liveness and readiness (the database answers), with no token; Prometheus metrics, with `flow:metrics` unless open. */
export const healthRoutes: FastifyPluginAsyncZod<HealthOptions> = async (app, { engine, accepting, metricsOpen }) => {
  app.get(
    '/healthz',
    { config: { scope: null }, logLevel: 'warn', schema: { tags: ['operations'], summary: 'The process is alive', response: { 200: Health } } },
    async () => ({ status: 'ok' as const }),
  );

  app.get(
    '/readyz',
    {
      config: { scope: null },
      logLevel: 'warn',
      schema: { tags: ['operations'], summary: 'The process takes traffic: not shutting down, and the database answers', response: { 200: Ready, ...PROBLEMS } },
    },
    async () => {
      if (!accepting()) throw new NotReady('shutting down');
      try {
        await engine.db.pool.query('SELECT 1');
      } catch (err) {
        throw new NotReady(`the database does not answer (${(err as Error).message})`);
      }
      return { status: 'ready' as const };
    },
  );

  app.get(
    '/metrics',
    {
      config: { scope: metricsOpen ? null : 'flow:metrics' },
      logLevel: 'warn',
      schema: {
        tags: ['operations'],
        summary: 'Prometheus metrics (flow_*); the database gauges are read once per scrape',
        ...(metricsOpen ? {} : { security: BEARER }),
        response: { 200: z.string(), ...PROBLEMS },
      },
    },
    async (req, reply) => {
      if (!metricsOpen) {
        // the series name every env's definitions: only a grant over all of them reads them
        const who = principalOf(req);
        if (!who.envs.includes(ALL_ENVS)) throw new EnvForbidden(who.subject, ALL_ENVS);
        requireScope(who, 'flow:metrics', undefined, 'GET /metrics (every env and definition)');
      }
      const { contentType, body } = await engine.metrics.render();
      return reply.type(contentType).serializer((s: string) => s).send(body);
    },
  );
};
