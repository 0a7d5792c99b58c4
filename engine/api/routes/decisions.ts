import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { DecisionParams, DecisionRequest } from '../../../contracts/api/decisions.ts';
import { WorkflowRecordSchema } from '../../../contracts/api/workflows.ts';
import type { Engine } from '../../runtime/engine.ts';
import { callerContext } from '../../tracing.ts';
import { principalOf } from '../guard.ts';
import { BEARER, PROBLEMS } from './shared.ts';

/**
 * An approver answers a decision. The approver is the token: its subject is audited and forwarded
 * as X-Flow-Approved-By, and its scopes must hold `flow:decide` for the definition and the step's
 * `approverScope` where it declares one — both checked by the runtime at execution time.
 */
export const decisionRoutes: FastifyPluginAsyncZod<{ engine: Engine }> = async (app, { engine }) => {
  app.post(
    '/v1/envs/:env/workflows/:id/decisions/:step',
    {
      config: { scope: 'flow:decide' },
      schema: {
        tags: ['decisions'],
        summary: 'Answer the decision the instance is parked on',
        security: BEARER,
        params: DecisionParams,
        body: DecisionRequest,
        response: { 200: WorkflowRecordSchema, ...PROBLEMS },
      },
    },
    async (req) => {
      const { env, id, step } = req.params;
      const who = principalOf(req);
      const { option, payload, reason } = req.body;
      const approver = { subject: who.subject, scopes: who.scopes };
      const args = { step, option, ...(payload === undefined ? {} : { payload: payload as never }), approver };
      // the instance's decision spans link to the approver's request (W3C traceparent)
      const record = await engine.resume(id, args, { env, ...(reason === undefined ? {} : { reason }), traceContext: callerContext(req.headers) });
      req.log.info({ step, option, approver: who.subject }, 'decision answered');
      return record;
    },
  );
};
