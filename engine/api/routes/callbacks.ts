import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { CallbackParams, CallbackRequest, CallbackResponse } from '../../../contracts/api/callbacks.ts';
import type { Engine } from '../../runtime/engine.ts';
import { callerContext } from '../../tracing.ts';
import { PROBLEMS } from './shared.ts';

/**
 * The 202 contract: the owning service completes a step it answered `202 {"status":"waiting"}`.
 * The resume token authenticates (a forged one is FLOW_BAD_TOKEN, 401); the env comes from the
 * record it names. A repeat of the answer already applied (same token, same body) answers as the
 * first delivery did; another body for it is 409 FLOW_CALLBACK_ANSWERED_DIFFERENTLY; a token for
 * an attempt that ended otherwise (timed out, retried, rewound, cancelled) is 409 FLOW_STALE_TOKEN.
 * One that overtakes the commit of the 202 answer waits for it, then (after 2 s) is 409
 * FLOW_NOT_YET_WAITING: sending it again is safe.
 */
export const callbackRoutes: FastifyPluginAsyncZod<{ engine: Engine }> = async (app, { engine }) => {
  app.post(
    '/v1/callbacks/:resumeToken',
    {
      config: { scope: null },
      schema: {
        tags: ['callbacks'],
        summary: 'Complete a step parked with 202, using its X-Flow-Resume-Token',
        params: CallbackParams,
        body: CallbackRequest,
        response: { 200: CallbackResponse, ...PROBLEMS },
      },
    },
    async (req) => {
      const body = req.body;
      const completion = 'output' in body ? { output: body.output } : { error: body.error, ...(body.retryable === undefined ? {} : { retryable: body.retryable }) };
      // the instance's flow.callback span links to the service's request (W3C traceparent)
      const { record, state } = await engine.completeCallback(req.params.resumeToken, completion, { traceContext: callerContext(req.headers) });
      req.log.child({ workflowId: record.id, env: record.env }).info({ state }, 'callback completed a step');
      return { workflowId: record.id, state };
    },
  );
};
