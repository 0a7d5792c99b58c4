import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { EnvParams } from '../../../contracts/api/common.ts';
import { IngestEventBody, IngestEventResponse } from '../../../contracts/api/events.ts';
import type { Engine } from '../../runtime/engine.ts';
import { callerContext } from '../../tracing.ts';
import { principalOf, requireScope } from '../guard.ts';
import { BEARER, PROBLEMS } from './shared.ts';

/**
 * Event ingress: records the event and starts one instance per trigger on its type. The caller
 * needs `flow:events` for the type (`flow:events:<glob>` matching it): posting an event is the
 * right to speak for its type, not to start any definition. Which definitions start was decided
 * by their publishers, each of whom held `flow:events` for the type (contracts/grants.ts).
 */
export const eventRoutes: FastifyPluginAsyncZod<{ engine: Engine }> = async (app, { engine }) => {
  app.post(
    '/v1/envs/:env/events',
    {
      config: { scope: 'flow:events' },
      schema: {
        tags: ['events'],
        summary: 'Ingest an event; each trigger on its type starts an instance (once per idempotency key)',
        security: BEARER,
        params: EnvParams,
        body: IngestEventBody,
        response: { 202: IngestEventResponse, ...PROBLEMS },
      },
    },
    async (req, reply) => {
      requireScope(principalOf(req), 'flow:events', req.body.type, `event ${req.body.type}`);
      // the instances it starts continue the sender's trace (W3C traceparent)
      const result = await engine.ingestEvent({ ...req.body, env: req.params.env }, { traceContext: callerContext(req.headers) });
      req.log.info({ event: req.body.type, started: result.ids, created: result.created, matched: result.matched }, 'event ingested');
      return reply.code(202).send(result);
    },
  );
};
