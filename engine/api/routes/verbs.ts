import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { WorkflowParams } from '../../../contracts/api/common.ts';
import { CancelRequest, ForceCompleteRequest, RepairRequest, ReplayRequest, RetryRequest, VerbPreview } from '../../../contracts/api/verbs.ts';
import { WorkflowRecordSchema } from '../../../contracts/api/workflows.ts';
import type { FlowScope } from '../../../contracts/scopes.ts';
import type { Preview } from '../../core/preview.ts';
import type { Engine } from '../../runtime/engine.ts';
import type { RepairArgs, VerbOptions } from '../../runtime/operations.ts';
import { principalOf } from '../guard.ts';
import { BEARER, PROBLEMS } from './shared.ts';

type Run<B> = (id: string, body: B, o: VerbOptions) => Promise<unknown>;

interface VerbRoute<S extends z.ZodType> {
  body: S;
  scope: FlowScope;
  summary: string;
  run: Run<z.infer<S>>;
  preview: (id: string, body: z.infer<S>, o: VerbOptions) => Promise<Preview>;
}

const route = <S extends z.ZodType>(r: VerbRoute<S>) => r;

/**
 * The five operator verbs (ARCHITECTURE.md, Contracts: HTTP API), each with a required reason and a dry run. The runtime
 * checks the scope against the instance's definition after reading it, so an instance of another
 * env is a 404 whatever the token holds; the actor is always the token's subject.
 */
export const verbRoutes: FastifyPluginAsyncZod<{ engine: Engine }> = async (app, { engine }) => {
  const ops = engine.ops;
  const verbs = {
    retry: route({
      body: RetryRequest,
      scope: 'flow:retry',
      summary: 'Re-run the failed step (or compensation) with a fresh attempt budget',
      run: (id, _b, o) => ops.retry(id, o),
      preview: (id, _b, o) => ops.previewRetry(id, o),
    }),
    repair: route({
      body: RepairRequest,
      scope: 'flow:repair',
      summary: 'Rewind to a step with new input, under a new generation',
      run: (id, b, o) => ops.repair(id, repairArgs(b), o),
      preview: (id, b, o) => ops.previewRepair(id, repairArgs(b), o),
    }),
    cancel: route({
      body: CancelRequest,
      scope: 'flow:cancel',
      summary: 'Cancel, optionally running registered compensations first',
      run: (id, b, o) => ops.cancel(id, { reason: b.reason, compensate: b.compensate ?? false }, o),
      preview: (id, b, o) => ops.previewCancel(id, { reason: b.reason, compensate: b.compensate ?? false }, o),
    }),
    'force-complete': route({
      body: ForceCompleteRequest,
      scope: 'flow:force-complete',
      summary: 'Mark the stuck step (or failed compensation) done with the given output',
      run: (id, b, o) => ops.forceComplete(id, { step: b.step, output: b.output as never }, o),
      preview: (id, b, o) => ops.previewForceComplete(id, { step: b.step, output: b.output as never }, o),
    }),
    replay: route({
      body: ReplayRequest,
      scope: 'flow:replay',
      summary: 'Re-run from a step with its original input, under a new generation',
      run: (id, b, o) => ops.replayFrom(id, { step: b.step }, o),
      preview: (id, b, o) => ops.previewReplayFrom(id, { step: b.step }, o),
    }),
  };

  for (const [name, verb] of Object.entries(verbs) as [string, VerbRoute<z.ZodType<{ reason: string; dryRun?: boolean }>>][]) {
    app.post(
      `/v1/envs/:env/workflows/:id/${name}`,
      {
        config: { scope: verb.scope },
        schema: {
          tags: ['verbs'],
          summary: verb.summary,
          security: BEARER,
          params: WorkflowParams,
          body: verb.body,
          response: { 200: z.union([WorkflowRecordSchema, VerbPreview]), ...PROBLEMS },
        },
      },
      async (req) => {
        const { env, id } = req.params;
        const body = req.body as { reason: string; dryRun?: boolean };
        const o: VerbOptions = { actor: principalOf(req), reason: body.reason, env };
        if (body.dryRun === true) return { dryRun: true as const, verb: name, ...(await verb.preview(id, body, o)) };
        const record = await verb.run(id, body, o);
        req.log.info({ verb: name, actor: o.actor.subject }, 'verb applied');
        return record as z.infer<typeof WorkflowRecordSchema>;
      },
    );
  }
};

function repairArgs(b: z.infer<typeof RepairRequest>): RepairArgs {
  return {
    rewindTo: b.rewindTo,
    ...(b.input === undefined ? {} : { input: b.input }),
    ...(b.compensateRewound === true ? { compensateRewound: true } : {}),
  };
}
