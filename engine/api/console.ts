import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Engine } from '../runtime/engine.ts';
import { type BulkOptions, bulkRoutes } from './routes/bulk.ts';
import { type ConsoleUiOptions, consoleUiRoutes } from './routes/console-ui.ts';
import { type LiveOptions, liveRoutes } from './routes/live.ts';
import { overviewRoutes } from './routes/overview.ts';

export type ConsoleOptions = { engine: Engine } & Omit<ConsoleUiOptions, 'engine'> & Omit<LiveOptions, 'engine'> & Omit<BulkOptions, 'engine'>;

/**
 * The operator console at `/ui`, and the routes only it and `s8flow` need beyond the API contract (ARCHITECTURE.md, Contracts: HTTP API):
 * the live instance stream, the overview, and bulk jobs, one file each under `routes/`.
 * Everything the console shows or does goes through the API with the signed-in bearer token,
 * checked by the same guard as every route; nothing here trusts the page.
 */
export const consolePlugin: FastifyPluginAsyncZod<ConsoleOptions> = async (app, opts) => {
  const { engine } = opts;
  await app.register(consoleUiRoutes, { engine, env: opts.env, devToken: opts.devToken });
  await app.register(overviewRoutes, { engine });
  await app.register(liveRoutes, { engine, diagram: opts.diagram });
  await app.register(bulkRoutes, { engine, ...(opts.databaseReady === undefined ? {} : { databaseReady: opts.databaseReady }) });
};
