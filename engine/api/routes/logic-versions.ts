import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { EnvParams, VersionParams } from '../../../contracts/api/common.ts';
import {
  PatchVersionRequest,
  PublishVersionRequest,
  PublishVersionResponse,
  VersionDetail,
  VersionList,
  VersionSummary,
} from '../../../contracts/api/logic-versions.ts';
import { CompatibilityParams, CompatibilityReport, CompatibilityRequest } from '../../../contracts/api/compatibility.ts';
import { grants } from '../../../contracts/scopes.ts';
import type { Engine } from '../../runtime/engine.ts';
import { principalOf, requireScope } from '../guard.ts';
import { BEARER, PROBLEMS } from './shared.ts';

/** Publish, list, show, retire and reactivate LogicVersions, and check a candidate against the live instances (ARCHITECTURE.md, Contracts: HTTP API). */
export const logicVersionRoutes: FastifyPluginAsyncZod<{ engine: Engine; publishBodyLimit: number }> = async (app, { engine, publishBodyLimit }) => {
  app.post(
    '/v1/envs/:env/logic-versions',
    {
      config: { scope: 'flow:publish' },
      bodyLimit: publishBodyLimit,
      schema: {
        tags: ['logic-versions'],
        summary: 'Publish a LogicVersion with its WASM modules (idempotent by hash)',
        security: BEARER,
        params: EnvParams,
        body: PublishVersionRequest,
        response: { 200: PublishVersionResponse, 201: PublishVersionResponse, ...PROBLEMS },
      },
    },
    async (req, reply) => {
      const who = principalOf(req);
      const logicId = String(req.body.logicVersion['logicId'] ?? '');
      requireScope(who, 'flow:publish', logicId, `LogicVersion ${logicId}`);
      const modules = Object.fromEntries(Object.entries(req.body.modules ?? {}).map(([sha, b64]) => [sha, new Uint8Array(Buffer.from(b64, 'base64'))]));
      // recorded with the version: what it may do at run time is what this caller may do now
      const result = await engine.publishVersion(req.params.env, req.body.logicVersion, modules, { subject: who.subject, scopes: who.scopes });
      req.log.info({ logicId: result.logicId, version: result.version, status: result.status }, 'published');
      return reply.code(result.status === 'new' ? 201 : 200).send(result);
    },
  );

  app.post(
    '/v1/envs/:env/logic-versions/:logicId/compatibility',
    {
      config: { scope: 'flow:publish' },
      bodyLimit: publishBodyLimit,
      schema: {
        tags: ['logic-versions'],
        summary: 'Check a candidate version against the live instances of a published one (nothing is published)',
        security: BEARER,
        params: CompatibilityParams,
        body: CompatibilityRequest,
        response: { 200: CompatibilityReport, ...PROBLEMS },
      },
    },
    async (req) => {
      const { env, logicId } = req.params;
      // the scope of publishing the candidate: the check is the first half of a publish
      requireScope(principalOf(req), 'flow:publish', logicId, `LogicVersion ${logicId}`);
      const report = await engine.compatibility(env, logicId, req.body.logicVersion, req.body.against, { replay: req.body.replay ?? 0 });
      req.log.info({ logicId, version: report.candidate.version, against: report.against?.version ?? null, verdict: report.verdict }, 'compatibility checked');
      return report;
    },
  );

  app.get(
    '/v1/envs/:env/logic-versions',
    {
      config: { scope: 'flow:read' },
      schema: { tags: ['logic-versions'], summary: 'List published versions', security: BEARER, params: EnvParams, response: { 200: VersionList, ...PROBLEMS } },
    },
    async (req) => {
      const who = principalOf(req);
      const items = await engine.listVersions(req.params.env);
      // a read scope narrowed to a glob lists only the definitions it matches
      return { items: items.filter((v) => grants(who.scopes, 'flow:read', v.logicId)) };
    },
  );

  app.get(
    '/v1/envs/:env/logic-versions/:logicId/:version',
    {
      config: { scope: 'flow:read' },
      schema: {
        tags: ['logic-versions'],
        summary: 'Show one version with its Mermaid diagram and in-flight count',
        security: BEARER,
        params: VersionParams,
        response: { 200: VersionDetail, ...PROBLEMS },
      },
    },
    async (req) => {
      const { env, logicId, version } = req.params;
      requireScope(principalOf(req), 'flow:read', logicId, `LogicVersion ${logicId}`);
      return engine.getVersion(env, logicId, version);
    },
  );

  app.patch(
    '/v1/envs/:env/logic-versions/:logicId/:version',
    {
      config: { scope: 'flow:publish' },
      schema: {
        tags: ['logic-versions'],
        summary: 'Retire (drain) or reactivate a version',
        security: BEARER,
        params: VersionParams,
        body: PatchVersionRequest,
        response: { 200: VersionSummary, ...PROBLEMS },
      },
    },
    async (req) => {
      const { env, logicId, version } = req.params;
      const who = principalOf(req);
      requireScope(who, 'flow:publish', logicId, `LogicVersion ${logicId}`);
      const row = await engine.setVersionActive(env, logicId, version, req.body.active, { actor: who.subject, reason: req.body.reason ?? null });
      req.log.info({ logicId, version, active: req.body.active }, req.body.active ? 'version reactivated' : 'version retired');
      return row;
    },
  );
};
