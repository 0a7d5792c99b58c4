import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { WorkflowParams } from '../../../contracts/api/common.ts';
import { HistoryVerbRequest, RetentionReport, RetentionRunRequest } from '../../../contracts/api/history.ts';
import { WorkflowRecordSchema } from '../../../contracts/api/workflows.ts';
import { RetentionBusy } from '../../errors.ts';
import type { Engine } from '../../runtime/engine.ts';
import { EnvForbidden } from '../errors.ts';
import { principalOf, requireScope } from '../guard.ts';
import { BEARER, PROBLEMS } from './shared.ts';

/**
 * Legal hold, its release, erasure, and an on-demand retention run. A hold needs `flow:admin`,
 * erasure `flow:erase` (both checked again against the instance's definition by the runtime);
 * a retention run spans every env, so it needs `flow:admin` un-narrowed and a token for every env.
 */
export const historyRoutes: FastifyPluginAsyncZod<{ engine: Engine }> = async (app, { engine }) => {
  const verbs = {
    hold: { scope: 'flow:admin', summary: 'Place a legal hold: retention keeps the instance until it is released', run: engine.history.hold.bind(engine.history) },
    'release-hold': { scope: 'flow:admin', summary: 'Release a legal hold', run: engine.history.releaseHold.bind(engine.history) },
    erase: {
      scope: 'flow:erase',
      summary: "Replace an ended instance's input, outputs, attempt data and journal payloads with tombstones",
      run: engine.history.erase.bind(engine.history),
    },
  } as const;
  for (const [name, verb] of Object.entries(verbs)) {
    app.post(
      `/v1/envs/:env/workflows/:id/${name}`,
      {
        config: { scope: verb.scope },
        schema: { tags: ['history'], summary: verb.summary, security: BEARER, params: WorkflowParams, body: HistoryVerbRequest, response: { 200: WorkflowRecordSchema, ...PROBLEMS } },
      },
      async (req) => {
        const { env, id } = req.params;
        return verb.run(id, { actor: principalOf(req), reason: req.body.reason, env });
      },
    );
  }

  app.post(
    '/v1/retention/run',
    {
      config: { scope: 'flow:admin' },
      schema: { tags: ['history'], summary: 'Run retention now (or dry): remove ended instances past their retention', security: BEARER, body: RetentionRunRequest, response: { 200: RetentionReport, ...PROBLEMS } },
    },
    async (req) => {
      const who = principalOf(req);
      requireScope(who, 'flow:admin', undefined, 'a retention run');
      if (!who.envs.includes('*')) throw new EnvForbidden(who.subject, '* (a retention run spans every env)');
      const report = await engine.retention.run({ dryRun: req.body.dryRun === true });
      if (report === null) throw new RetentionBusy();
      return report;
    },
  );
};
