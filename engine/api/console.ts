import type { FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { BulkJob, BulkPreview, BulkRequest, BulkVerb } from '../../contracts/api/bulk.ts';
import { EnvParams, WorkflowParams } from '../../contracts/api/common.ts';
import type { LogicVersion } from '../../contracts/index.ts';
import { mermaidDiagram } from '../../contracts/mermaid.ts';
import { BulkJobs } from '../runtime/bulk-jobs.ts';
import { Changes } from '../runtime/changes.ts';
import type { Engine } from '../runtime/engine.ts';
import { readOverview } from '../store/overview.ts';
import { inEnv } from '../store/tx.ts';
import { consoleBundle } from './console-bundle.ts';
import { streamInstance } from './console-live.ts';
import { principalOf, requireScope } from './guard.ts';
import { BEARER, PROBLEMS } from './routes/shared.ts';

export interface ConsoleOptions {
  engine: Engine;
  /** Mermaid text of a version, for its diagram. (Default: the compiler's `.mmd`, contracts/mermaid.ts) */
  diagram?: (doc: LogicVersion) => string;
  /**
   * `s8flow dev` only: mints the token the console signs in with by itself, handed only to a page
   * loaded from localhost, 127.0.0.1 or [::1] on the listening port. Never set in production.
   */
  devToken?: () => Promise<string>;
  /** The env the console opens on. (Default: the engine's) */
  env?: string;
}

/** The page every console URL answers with; its config is inline, which saves the app a round trip. */
const shell = (config: unknown) => `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sentin8 Flow</title><link rel="icon" href="data:,"><link rel="stylesheet" href="/ui/assets/console.css">
<script id="flow-config" type="application/json">${JSON.stringify(config).replace(/</g, '\\u003c')}</script></head>
<body><div id="app"></div><script type="module" src="/ui/assets/console.js"></script></body></html>`;

const LOOPBACK_NAMES = new Set(['localhost', '127.0.0.1', '[::1]']);

/**
 * True when the page was asked for by a loopback name or address on the port this socket listens
 * on: the only pages `s8flow dev` hands its token to. DNS rebinding (a page of evil.example whose
 * name now resolves to 127.0.0.1) reaches the same socket but sends its own name as `Host`.
 */
function fromLoopback(req: FastifyRequest): boolean {
  const m = /^(\[[^\]]*\]|[^:]+)(?::(\d{1,5}))?$/.exec((req.headers.host ?? '').toLowerCase());
  if (m === null || !LOOPBACK_NAMES.has(m[1]!)) return false;
  return Number(m[2] ?? 80) === req.socket.localPort;
}

const JobParams = z.strictObject({ env: EnvParams.shape.env, jobId: z.uuid() });
const hidden = { hide: true } as const;

/**
 * The operator console at `/ui`, and the routes only it and `s8flow` need beyond the API contract (ARCHITECTURE.md, Contracts: HTTP API):
 * the live instance stream (server-sent events fed by LISTEN/NOTIFY), the overview, and bulk
 * jobs. Everything the console shows or does goes through the API with the signed-in bearer
 * token, checked by the same guard as every route; nothing here trusts the page.
 */
export const consolePlugin: FastifyPluginAsyncZod<ConsoleOptions> = async (app, opts) => {
  const { engine } = opts;
  const bundle = consoleBundle();
  const changes = new Changes(engine.db);
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
  app.addHook('onReady', async () => resume());
  app.addHook('onClose', async () => {
    clearTimeout(retry);
    await bulk.stopAll();
    await changes.close();
  });

  app.get('/ui', { config: { scope: null }, schema: hidden }, (_req, reply) => reply.redirect('/ui/'));
  app.get('/ui/*', { config: { scope: null }, schema: hidden }, async (req, reply) => {
    const path = (req.params as { '*': string })['*'];
    if (path === 'assets/console.js') return reply.type('text/javascript; charset=utf-8').header('cache-control', 'no-cache').send((await bundle).js);
    if (path === 'assets/console.css') return reply.type('text/css; charset=utf-8').header('cache-control', 'no-cache').send((await bundle).css);
    const config = { env: opts.env ?? engine.env, ...(opts.devToken && fromLoopback(req) ? { devToken: await opts.devToken() } : {}) };
    if (path === 'config.json') return config;
    // every other path is a page of the single-page app
    return reply.type('text/html; charset=utf-8').header('cache-control', 'no-store').send(shell(config));
  });

  app.get(
    '/v1/envs/:env/overview',
    {
      config: { scope: 'flow:read' },
      schema: { tags: ['console'], summary: 'Counts by state per version, stuck instances, dead letters, decisions waiting, queue depth', security: BEARER, params: EnvParams },
    },
    async (req) => {
      const env = req.params.env;
      requireScope(principalOf(req), 'flow:read', undefined, 'the overview of every definition');
      const [overview, stuck, dead] = await Promise.all([
        inEnv(engine.db, env, (c) => readOverview(c)),
        engine.ops.listStuck({ env, limit: 50 }),
        engine.ops.listDeadLettered({ env, limit: 50 }),
      ]);
      const brief = ({ ctx: _ctx, ...rest }: (typeof stuck)[number]) => rest;
      return { ...overview, stuck: stuck.map(brief), deadLettered: dead.map(brief) };
    },
  );

  app.get(
    '/v1/envs/:env/workflows/:id/live',
    {
      config: { scope: 'flow:read' },
      schema: { tags: ['console'], summary: 'The instance as server-sent events: a snapshot, then an update per committed change', security: BEARER, params: WorkflowParams },
    },
    async (req, reply) => {
      const { env, id } = req.params;
      const record = await engine.get(id, env);
      const who = principalOf(req);
      requireScope(who, 'flow:read', record.logicId, `workflow ${id}`);
      const logic = await engine.logics.get(env, record.logicHash);
      const audit = await engine.ops.audit(id, { env });
      reply.hijack();
      reply.raw.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-accel-buffering': 'no' });
      // it ends when the client leaves or the token expires, whichever comes first
      await streamInstance(reply.raw, engine, changes, env, { record, audit, logic, mmd: (opts.diagram ?? mermaidDiagram)(logic) }, { until: who.expiresAt });
    },
  );

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
