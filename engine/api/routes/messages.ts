import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { MessageAnswer, MessageHeaders, MessageParams, MessageRequest } from '../../../contracts/api/messages.ts';
import type { JsonValue } from '../../core/instance.ts';
import type { Engine } from '../../runtime/engine.ts';
import { principalOf } from '../guard.ts';
import { BEARER, PROBLEMS } from './shared.ts';

/**
 * A message to a running instance (docs/messages.md). The sender needs `flow:signal` for the
 * instance's definition, checked by the runtime with the instance read. The answer a key got first
 * is the answer to every repeat of it: 200 delivered, or 202 buffered until the step is reached.
 */
export const messageRoutes: FastifyPluginAsyncZod<{ engine: Engine }> = async (app, { engine }) => {
  app.post(
    '/v1/envs/:env/workflows/:id/messages/:name',
    {
      config: { scope: 'flow:signal' },
      schema: {
        tags: ['messages'],
        summary: 'Deliver a message to the waitFor step the instance is parked on (200), or buffer it until one is reached (202)',
        security: BEARER,
        params: MessageParams,
        headers: MessageHeaders,
        body: MessageRequest,
        response: { 200: MessageAnswer, 202: MessageAnswer, ...PROBLEMS },
      },
    },
    async (req, reply) => {
      const { env, id, name } = req.params;
      const who = principalOf(req);
      const m = { name, payload: (req.body ?? null) as JsonValue, key: req.headers['idempotency-key'], sender: { subject: who.subject, scopes: who.scopes } };
      const answer = await engine.deliverMessage(id, m, { env });
      req.log.info({ workflowId: id, message: name, status: answer.status }, 'message delivered');
      return reply.code(answer.status).send(answer.body as MessageAnswer);
    },
  );
};
