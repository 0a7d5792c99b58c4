import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { jsonSchemaTransform, jsonSchemaTransformObject, validatorCompiler } from 'fastify-type-provider-zod';
import type { Engine } from '../runtime/engine.ts';
import { type AuthOptions, createAuthenticator } from './auth.ts';
import { type ConsoleOptions, consolePlugin } from './console.ts';
import { installGuard } from './guard.ts';
import { frameworkErrors, installProblemHandlers } from './problem.ts';
import { redactingLogger } from './redact.ts';
import { installSecurityHeaders } from './security-headers.ts';
import { serializerCompiler } from './serialize.ts';
import { limitRoutes } from './routes/limits.ts';
import { callbackRoutes } from './routes/callbacks.ts';
import { decisionRoutes } from './routes/decisions.ts';
import { messageRoutes } from './routes/messages.ts';
import { eventRoutes } from './routes/events.ts';
import { healthRoutes } from './routes/health.ts';
import { handlerRoutes } from './routes/handlers.ts';
import { logicVersionRoutes } from './routes/logic-versions.ts';
import { scheduleRoutes } from './routes/schedules.ts';
import { verbRoutes } from './routes/verbs.ts';
import { historyRoutes } from './routes/history.ts';
import { workflowRoutes } from './routes/workflows.ts';

export interface ApiOptions {
  engine: Engine;
  auth: AuthOptions;
  /** Largest request body, in bytes, on every route but publishing. (Default: 1 MiB) */
  bodyLimit?: number;
  /** Largest publish body (a LogicVersion and its base64 WASM modules). (Default: 32 MiB) */
  publishBodyLimit?: number;
  /** Fastify's pino logger: `false` for none, `true` or pino options; request URLs are logged with resume tokens redacted. (Default: false) */
  logger?: FastifyServerOptions['logger'];
  /**
   * GET /metrics without a token. Otherwise it needs an un-narrowed `flow:metrics` (or `flow:admin`)
   * for every env (`envs: ["*"]`): its series name every env's definitions. (Default: false)
   */
  metricsOpen?: boolean;
  /** The operator console at /ui and its routes (live stream, overview, bulk jobs). (Default: served, no dev token) */
  console?: Omit<ConsoleOptions, 'engine'> | false;
}

export interface Api {
  app: FastifyInstance;
  /** Stops taking traffic: /readyz answers 503 from now on, then the listener closes. */
  close(): Promise<void>;
}

/**
 * The HTTP API v1 (ARCHITECTURE.md, Contracts: HTTP API) in front of an Engine. Every route's params, query, headers,
 * body and responses are the zod schemas of `contracts/api`: they validate requests, type the
 * handlers and generate GET /openapi.json (OpenAPI 3.1), rendered at GET /docs.
 */
export async function buildApi(opts: ApiOptions): Promise<Api> {
  const bodyLimit = opts.bodyLimit ?? 1024 * 1024;
  const publishBodyLimit = opts.publishBodyLimit ?? 32 * 1024 * 1024;
  const app = Fastify({ logger: redactingLogger(opts.logger), bodyLimit, return503OnClosing: true, frameworkErrors });
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  installSecurityHeaders(app);
  installProblemHandlers(app, (req) => req.routeOptions.bodyLimit ?? bodyLimit);
  installGuard(app, createAuthenticator(opts.auth));
  let accepting = true;

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Sentin8 Flow', version: '1', description: 'The HTTP API of the Sentin8 Flow engine (ARCHITECTURE.md, Contracts: HTTP API).' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } } },
    },
    transform: jsonSchemaTransform,
    transformObject: jsonSchemaTransformObject,
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });
  app.get('/openapi.json', { config: { scope: null }, schema: { hide: true } }, async () => app.swagger());

  const { engine } = opts;
  await app.register(healthRoutes, { engine, accepting: () => accepting, metricsOpen: opts.metricsOpen ?? false });
  await app.register(logicVersionRoutes, { engine, publishBodyLimit });
  await app.register(handlerRoutes, { engine });
  await app.register(workflowRoutes, { engine });
  await app.register(verbRoutes, { engine });
  await app.register(historyRoutes, { engine });
  await app.register(decisionRoutes, { engine });
  await app.register(messageRoutes, { engine });
  await app.register(callbackRoutes, { engine });
  await app.register(limitRoutes, { engine });
  await app.register(eventRoutes, { engine });
  await app.register(scheduleRoutes, { engine });
  if (opts.console !== false) await app.register(consolePlugin, { engine, ...opts.console });
  await app.ready();
  return {
    app,
    async close() {
      accepting = false;
      await app.close();
    },
  };
}
