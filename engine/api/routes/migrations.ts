import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { BulkJob } from '../../../contracts/api/bulk.ts';
import { EnvParams } from '../../../contracts/api/common.ts';
import { MigrateRequest, MigrationPreview } from '../../../contracts/api/migrations.ts';
import type { BulkJobs } from '../../runtime/bulk-jobs.ts';
import type { Engine } from '../../runtime/engine.ts';
import { principalOf, requireScope } from '../guard.ts';
import { BEARER, PROBLEMS } from './shared.ts';

/**
 * `POST /v1/envs/{env}/migrations`: the migrate verb (docs/versions.md, "Migrating instances").
 * A dry run answers per instance; otherwise a bulk job of `jobs` moves them, followed and aborted
 * through the bulk routes. `flow:migrate` for the definition is checked here and again, on the
 * source and the target version, for every instance the job moves.
 */
export function migrationRoutes(app: FastifyInstance, engine: Engine, jobs: BulkJobs): void {
  app.withTypeProvider<ZodTypeProvider>().post(
    '/v1/envs/:env/migrations',
    {
      config: { scope: 'flow:migrate' },
      schema: {
        tags: ['bulk'],
        summary: 'Preview (dryRun) or start a server-side job that moves instances of a version to a later version',
        security: BEARER,
        params: EnvParams,
        body: MigrateRequest,
        response: { 200: MigrationPreview, 202: BulkJob, ...PROBLEMS },
      },
    },
    async (req, reply) => {
      const { env } = req.params;
      const who = principalOf(req);
      requireScope(who, 'flow:migrate', req.body.logicId, `migrating ${req.body.logicId}`);
      const actor = { subject: who.subject, scopes: who.scopes };
      if (req.body.dryRun === true) return engine.ops.migrations.preview(req.body, actor, { env });
      return reply.code(202).send(await jobs.startMigration(env, req.body, actor));
    },
  );
}
