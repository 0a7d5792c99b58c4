import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { BulkJob, BulkPreview, BulkRequest, BulkVerb } from '../../../contracts/api/bulk.ts';
import { EnvParams } from '../../../contracts/api/common.ts';
import { BulkJobs } from '../../runtime/bulk-jobs.ts';
import type { Engine } from '../../runtime/engine.ts';
import { principalOf, requireScope } from '../guard.ts';
import { migrationRoutes } from './migrations.ts';
import { BEARER, PROBLEMS } from './shared.ts';

const JobParams = z.strictObject({ env: EnvParams.shape.env, jobId: z.uuid() });

export interface BulkOptions {
  engine: Engine;
  /**
   * Settles once the database is migrated: jobs a stopped process left running resume only then.
   * `s8flow start` builds the API before it migrates. (Default: at once)
   */
  databaseReady?: Promise<unknown>;
}

/** Bulk jobs: preview or start a verb (or a migration) over the instances a filter selects, follow a job, abort it. */
export const bulkRoutes: FastifyPluginAsyncZod<BulkOptions> = async (app, { engine, databaseReady }) => {
  const bulk = new BulkJobs(engine.db, engine.ops, (err) => app.log.error({ err }, 'a bulk job stopped'));
  // Jobs a stopped process left running go on here, in the background and again every few seconds
  // until it works: the server may be built before the database is up or migrated (s8flow start
  // does so on purpose), and that must not stop it — /readyz reports the database.
  let retry: NodeJS.Timeout | undefined;
  const resume = () => {
    bulk.resume().catch((err) => {
      app.log.warn({ err }, 'bulk jobs not resumed yet');
      retry = setTimeout(resume, 5000).unref();
    });
  };
  let closed = false;
  app.addHook('onReady', async () => {
    void Promise.resolve(databaseReady).then(() => {
      if (!closed) resume();
    });
  });
  app.addHook('onClose', async () => {
    closed = true;
    clearTimeout(retry);
    await bulk.stopAll();
  });

  migrationRoutes(app, engine, bulk);

  for (const verb of BulkVerb.options) {
    app.post(
      `/v1/envs/:env/bulk/${verb}`,
      {
        config: { scope: `flow:${verb}` },
        schema: {
          tags: ['bulk'],
          summary: `Preview (dryRun) or start a server-side job that runs ${verb} on every instance the filter selects`,
          security: BEARER,
          params: EnvParams,
          body: BulkRequest,
          response: { 200: BulkPreview, 202: BulkJob, ...PROBLEMS },
        },
      },
      async (req, reply) => {
        const { env } = req.params;
        const who = principalOf(req);
        const logicId = req.body.filter.logicId;
        // a scope narrowed to a glob acts in bulk only on a filter naming a definition it matches
        requireScope(who, `flow:${verb}`, logicId, logicId === undefined ? `bulk ${verb} over every definition` : `bulk ${verb} on ${logicId}`);
        if (req.body.dryRun === true) return bulk.preview(env, req.body);
        return reply.code(202).send(await bulk.start(env, verb, req.body, { subject: who.subject, scopes: who.scopes }));
      },
    );
  }

  app.get(
    '/v1/envs/:env/bulk/:jobId',
    {
      config: { scope: 'flow:read' },
      schema: { tags: ['bulk'], summary: 'A bulk job: progress and the result per instance', security: BEARER, params: JobParams, response: { 200: BulkJob, ...PROBLEMS } },
    },
    async (req) => {
      const job = await bulk.get(req.params.env, req.params.jobId);
      // its results name instances of the filter's definition (of every one, without a filter)
      requireScope(principalOf(req), 'flow:read', job.filter.logicId, `bulk job ${job.id}`);
      return job;
    },
  );

  app.post(
    '/v1/envs/:env/bulk/:jobId/abort',
    {
      config: { scope: 'flow:read' },
      schema: { tags: ['bulk'], summary: 'Stop a bulk job before its next instance', security: BEARER, params: JobParams, response: { 200: BulkJob, ...PROBLEMS } },
    },
    async (req) => {
      const { env, jobId } = req.params;
      const job = await bulk.get(env, jobId);
      requireScope(principalOf(req), `flow:${job.verb}`, job.filter.logicId, `aborting bulk ${job.verb}`);
      return bulk.abort(env, jobId);
    },
  );
};
