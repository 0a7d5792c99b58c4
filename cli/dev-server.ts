import Fastify, { type FastifyInstance } from 'fastify';
import { jwtVerify } from 'jose';
import { FlowError } from '../contracts/errors.ts';
import { type FlowScope, grants, grantsEnv } from '../contracts/scopes.ts';
import { consolePlugin } from '../engine/api/console.ts';
import type { Engine } from '../engine/runtime/engine.ts';

/** TEMPORARY until the api lane's server lands: fastify with the console and an HS256 check. */
export async function devServer(o: { engine: Engine; secret: string; devToken: () => Promise<string> }): Promise<FastifyInstance> {
  const app = Fastify();
  const key = new TextEncoder().encode(o.secret);
  app.setErrorHandler((err, req, reply) => {
    const e = err as FlowError;
    const status = e instanceof FlowError ? e.status : 500;
    reply.code(status).type('application/problem+json').send({ type: `urn:sentin8-flow:error:${e.code}`, title: e.code, status, code: e.code ?? 'FLOW_INTERNAL', detail: e.message, instance: req.url });
  });
  await app.register(consolePlugin, {
    engine: o.engine,
    devToken: o.devToken,
    async authorize(req, env, scope, logicId) {
      const h = req.headers.authorization ?? '';
      const { payload } = await jwtVerify(h.replace(/^Bearer /, ''), key).catch(() => {
        throw new FlowError('FLOW_UNAUTHENTICATED', 'no or bad token', { status: 401 });
      });
      const scopes = String(payload['scope'] ?? '').split(/\s+/);
      if (!grantsEnv((payload['envs'] as string[]) ?? [], env)) throw new FlowError('FLOW_FORBIDDEN', `env ${env} not granted`, { status: 403 });
      if (!grants(scopes, scope as FlowScope, logicId)) throw new FlowError('FLOW_FORBIDDEN', `needs ${scope}`, { status: 403 });
      return { subject: String(payload.sub), scopes };
    },
  });
  return app;
}
