import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { EnvParams } from '../../../contracts/api/common.ts';
import { IngestEventBody, IngestEventResponse } from '../../../contracts/api/events.ts';
import type { Engine } from '../../runtime/engine.ts';
import { principalOf, requireScope } from '../guard.ts';
import { BEARER, PROBLEMS } from './shared.ts';

/**
 * Event ingress: records the event and starts one instance per trigger on its type. Which
 * definitions start is known only inside the transaction, so this needs `flow:start` on every
 * definition (a glob-narrowed start scope is not enough).
 */
export const eventRoutes: FastifyPluginAsyncZod<{ engine: Engine }> = async (app, { engine }) => {
  app.post(
    '/v1/envs/:env/events',
    {
      config: { scope: 'flow:start' },
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
      requireScope(principalOf(req), 'flow:start', undefined, `event ${req.body.type}`);
      const result = await engine.ingestEvent({ ...req.body, env: req.params.env });
      req.log.info({ event: req.body.type, started: result.ids, created: result.created, matched: result.matched }, 'event ingested');
      return reply.code(202).send(result);
    },
  );
};
