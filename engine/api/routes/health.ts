import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { Health, Ready } from '../../../contracts/api/health.ts';
import type { Engine } from '../../runtime/engine.ts';
import { NotReady } from '../errors.ts';
import { PROBLEMS } from './shared.ts';

export interface HealthOptions {
  engine: Engine;
  /** False once shutdown began, so load balancers stop sending before the listener closes. */
  accepting: () => boolean;
}

/** Liveness, readiness (the database answers) and Prometheus metrics; no token. */
export const healthRoutes: FastifyPluginAsyncZod<HealthOptions> = async (app, { engine, accepting }) => {
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
      config: { scope: null },
      logLevel: 'warn',
      schema: { tags: ['operations'], summary: 'Prometheus metrics (flow_*); the database gauges are read once per scrape', response: { 200: z.string() } },
    },
    async (_req, reply) => {
      const { contentType, body } = await engine.metrics.render();
      return reply.type(contentType).serializer((s: string) => s).send(body);
    },
  );
};
