import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { EnvParams, WorkflowParams } from '../../../contracts/api/common.ts';
import { attributeQuery } from '../../../contracts/api/attributes.ts';
import {
  HistoryQuery,
  ListWorkflowsQuery,
  StartWorkflowBody,
  StartWorkflowHeaders,
  WorkflowHistory,
  WorkflowPage,
  WorkflowRecordSchema,
  WorkflowTrace,
} from '../../../contracts/api/workflows.ts';
import type { WorkflowState } from '../../../contracts/index.ts';
import type { Engine } from '../../runtime/engine.ts';
import { exportTrace } from '../../runtime/export-trace.ts';
import { callerContext } from '../../tracing.ts';
import { decodeCursor, encodeCursor } from '../cursor.ts';
import { principalOf, requireScope } from '../guard.ts';
import { BEARER, PROBLEMS } from './shared.ts';

/** Start, list, show and the history of workflow instances (ARCHITECTURE.md, Contracts: HTTP API). */
export const workflowRoutes: FastifyPluginAsyncZod<{ engine: Engine }> = async (app, { engine }) => {
  app.post(
    '/v1/envs/:env/workflows',
    {
      config: { scope: 'flow:start' },
      schema: {
        tags: ['workflows'],
        summary: 'Start a workflow (201), or return the one an earlier request with this Idempotency-Key started (200)',
        security: BEARER,
        params: EnvParams,
        headers: StartWorkflowHeaders,
        body: StartWorkflowBody,
        response: { 200: WorkflowRecordSchema, 201: WorkflowRecordSchema, ...PROBLEMS },
      },
    },
    async (req, reply) => {
      const { env } = req.params;
      requireScope(principalOf(req), 'flow:start', req.body.logicId, `starting ${req.body.logicId}`);
      const key = req.headers['idempotency-key'];
      // the instance's trace continues the caller's (W3C traceparent)
      const request = { ...req.body, env, ...(key === undefined ? {} : { idempotencyKey: key }) };
      const { record, created } = await engine.startRecord(request, { traceContext: callerContext(req.headers) });
      req.log.child({ workflowId: record.id }).info({ logicId: req.body.logicId, created }, created ? 'workflow started' : 'start replayed');
      return reply.code(created ? 201 : 200).send(record);
    },
  );

  app.get(
    '/v1/envs/:env/workflows',
    {
      config: { scope: 'flow:read' },
      schema: {
        tags: ['workflows'],
        summary: 'List instances, newest first, a page at a time',
        security: BEARER,
        params: EnvParams,
        querystring: ListWorkflowsQuery,
        response: { 200: WorkflowPage, ...PROBLEMS },
      },
    },
    async (req) => {
      const q = req.query;
      // a read scope narrowed to a glob lists only with a logicId filter the glob matches
      requireScope(principalOf(req), 'flow:read', q.logicId, q.logicId === undefined ? 'listing every definition' : `listing ${q.logicId}`);
      const limit = q.limit ?? 50;
      const rows = await engine.ops.list(
        {
          ...(q.state === undefined ? {} : { state: q.state as WorkflowState }),
          ...(q.logicId === undefined ? {} : { logicId: q.logicId }),
          ...(q.version === undefined ? {} : { version: q.version }),
          ...(q.correlationId === undefined ? {} : { correlationId: q.correlationId }),
          ...(q.stuck === undefined ? {} : { stuck: q.stuck }),
          ...(q.parent === undefined ? {} : { parent: q.parent }),
          ...(q.from === undefined ? {} : { from: q.from }),
          ...(q.to === undefined ? {} : { to: q.to }),
          ...(q.slaBreached === undefined ? {} : { slaBreached: q.slaBreached }),
          attributes: attributeQuery(q),
        },
        { env: req.params.env, limit: limit + 1, after: q.cursor === undefined ? null : decodeCursor(q.cursor) },
      );
      const page = rows.slice(0, limit);
      const last = page.at(-1);
      return {
        items: page.map(({ position: _, ...item }) => item),
        nextCursor: rows.length > limit && last !== undefined ? encodeCursor(last.position) : null,
      };
    },
  );

  app.get(
    '/v1/envs/:env/workflows/:id',
    {
      config: { scope: 'flow:read' },
      schema: { tags: ['workflows'], summary: 'Show one instance (its WorkflowRecord)', security: BEARER, params: WorkflowParams, response: { 200: WorkflowRecordSchema, ...PROBLEMS } },
    },
    async (req) => {
      const record = await engine.get(req.params.id, req.params.env);
      requireScope(principalOf(req), 'flow:read', record.logicId, `workflow ${record.id}`);
      return record;
    },
  );

  app.get(
    '/v1/envs/:env/workflows/:id/history',
    {
      config: { scope: 'flow:read' },
      schema: {
        tags: ['workflows'],
        summary: 'Every attempt, compensation and audited verb of one instance; with format=trace, its journal as a replayable trace',
        security: BEARER,
        params: WorkflowParams,
        querystring: HistoryQuery,
        response: { 200: z.union([WorkflowHistory, WorkflowTrace]), ...PROBLEMS },
      },
    },
    async (req) => {
      const { env, id } = req.params;
      const record = await engine.get(id, env);
      requireScope(principalOf(req), 'flow:read', record.logicId, `workflow ${record.id}`);
      if (req.query.format === 'trace') return exportTrace(engine, env, id);
      const audit = await engine.ops.audit(id, { env });
      return {
        id,
        attempts: record.steps,
        compensations: record.compensations,
        audit: audit.map((a) => ({ ...a, at: a.at.toISOString() })),
      };
    },
  );
};
