import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { BULK_VERBS, type BulkVerb } from '../../contracts/api/bulk.ts';
import { FlowError, type LogicVersion } from '../../contracts/index.ts';
import { mermaidDiagram } from '../../contracts/mermaid.ts';
import { BulkJobs } from '../runtime/bulk-jobs.ts';
import { Changes } from '../runtime/changes.ts';
import type { Engine } from '../runtime/engine.ts';
import type { Actor } from '../runtime/operations.ts';
import { readOverview } from '../store/overview.ts';
import { inEnv } from '../store/tx.ts';
import { consoleBundle } from './console-bundle.ts';
import { streamInstance } from './console-live.ts';

export interface ConsoleOptions {
  engine: Engine;
  /**
   * The server's bearer-token check: the actor when the token grants `env` and `scope` (for
   * `logicId` when given), else a FlowError (401/403) that the server's error handler answers.
   */
  authorize(req: FastifyRequest, env: string, scope: string, logicId?: string): Promise<Actor>;
  /** Mermaid text of a version, for its diagram. (Default: the compiler's `.mmd`, contracts/mermaid.ts) */
  diagram?: (doc: LogicVersion) => string;
  /** `s8flow dev` only: mints the token the console signs in with by itself. Never set in production. */
  devToken?: () => Promise<string>;
  /** The env the console opens on. (Default: the engine's) */
  env?: string;
}

type EnvParams = { env: string };

const shell = (title: string) => `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title}</title><link rel="icon" href="data:,"><link rel="stylesheet" href="/ui/assets/console.css"></head>
<body><div id="app"></div><script type="module" src="/ui/assets/console.js"></script></body></html>`;

/**
 * The operator console at `/ui` and the routes only it and `s8flow` need beyond DESIGN.md §10:
 * the live instance stream (SSE), the overview, and bulk jobs. Everything the console shows or
 * does goes through the HTTP API with the signed-in bearer token; nothing here trusts the page.
 */
export async function consolePlugin(app: FastifyInstance, opts: ConsoleOptions): Promise<void> {
  const { engine, authorize } = opts;
  const bundle = consoleBundle();
  const changes = new Changes(engine.db);
  const bulk = new BulkJobs(engine.db, engine.ops, (err) => app.log.error({ err }, 'a bulk job stopped'));
  // jobs a stopped process left running go on here; on close, running jobs finish their current instance
  app.addHook('onReady', () => bulk.resume());
  app.addHook('onClose', async () => {
    await bulk.stopAll();
    await changes.close();
  });

  app.get('/ui', (_req, reply) => void reply.redirect('/ui/'));
  app.get('/ui/*', async (req, reply) => {
    const path = (req.params as { '*': string })['*'];
    if (path === 'assets/console.js') return reply.type('text/javascript; charset=utf-8').header('cache-control', 'no-cache').send((await bundle).js);
    if (path === 'assets/console.css') return reply.type('text/css; charset=utf-8').header('cache-control', 'no-cache').send((await bundle).css);
    if (path === 'config.json') return { env: opts.env ?? engine.env, ...(opts.devToken ? { devToken: await opts.devToken() } : {}) };
    // every other path is a page of the single-page app
    return reply.type('text/html; charset=utf-8').send(shell('Sentin8 Flow'));
  });

  app.get<{ Params: EnvParams }>('/v1/envs/:env/overview', async (req) => {
    const env = req.params.env;
    await authorize(req, env, 'flow:read');
    const [overview, stuck, dead] = await Promise.all([
      inEnv(engine.db, env, (c) => readOverview(c)),
      engine.ops.listStuck({ env, limit: 50 }),
      engine.ops.listDeadLettered({ env, limit: 50 }),
    ]);
    const brief = ({ ctx: _ctx, ...rest }: (typeof stuck)[number]) => rest;
    return { ...overview, stuck: stuck.map(brief), deadLettered: dead.map(brief) };
  });

  app.get<{ Params: EnvParams & { id: string } }>('/v1/envs/:env/workflows/:id/live', async (req, reply: FastifyReply) => {
    const { env, id } = req.params;
    await authorize(req, env, 'flow:read');
    const record = await engine.get(id, env);
    await authorize(req, env, 'flow:read', record.logicId);
    const logic = await engine.logics.get(env, record.logicHash);
    const audit = await engine.ops.audit(id, { env });
    reply.hijack();
    reply.raw.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    const stop = await streamInstance(reply.raw, engine, changes, env, { record, audit, logic, mmd: (opts.diagram ?? mermaidDiagram)(logic) });
    req.raw.once('close', stop);
  });

  app.post<{ Params: EnvParams & { verb: string } }>('/v1/envs/:env/bulk/:verb', async (req, reply) => {
    const { env, verb } = req.params;
    if (!(BULK_VERBS as readonly string[]).includes(verb)) {
      throw new FlowError('FLOW_BULK_BAD_REQUEST', `no bulk verb ${verb}; use one of ${BULK_VERBS.join(', ')}`, { status: 404 });
    }
    const logicId = (req.body as { filter?: { logicId?: string } } | null)?.filter?.logicId;
    const actor = await authorize(req, env, `flow:${verb}`, logicId);
    if ((req.body as { dryRun?: boolean } | null)?.dryRun === true) return bulk.preview(env, req.body);
    return reply.code(202).send(await bulk.start(env, verb as BulkVerb, req.body, actor));
  });

  app.get<{ Params: EnvParams & { jobId: string } }>('/v1/envs/:env/bulk/:jobId', async (req) => {
    await authorize(req, req.params.env, 'flow:read');
    return bulk.get(req.params.env, req.params.jobId);
  });

  app.post<{ Params: EnvParams & { jobId: string } }>('/v1/envs/:env/bulk/:jobId/abort', async (req) => {
    const { env, jobId } = req.params;
    const job = await bulk.get(env, jobId);
    await authorize(req, env, `flow:${job.verb}`, job.filter.logicId);
    return bulk.abort(env, jobId);
  });
}
