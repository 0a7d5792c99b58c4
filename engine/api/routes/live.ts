import type { OutgoingHttpHeaders } from 'node:http';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { WorkflowParams } from '../../../contracts/api/common.ts';
import type { LogicVersion } from '../../../contracts/index.ts';
import { mermaidDiagram } from '../../../contracts/mermaid.ts';
import { Changes } from '../../runtime/changes.ts';
import type { Engine } from '../../runtime/engine.ts';
import { streamInstance } from '../console-live.ts';
import { principalOf, requireScope } from '../guard.ts';
import { BEARER } from './shared.ts';

export interface LiveOptions {
  engine: Engine;
  /** Mermaid text of a version, for its diagram. (Default: the compiler's `.mmd`, contracts/mermaid.ts) */
  diagram?: (doc: LogicVersion) => string;
}

/** One instance as server-sent events, fed by LISTEN/NOTIFY: a snapshot, then an update per committed change. */
export const liveRoutes: FastifyPluginAsyncZod<LiveOptions> = async (app, opts) => {
  const { engine } = opts;
  const changes = new Changes(engine.db);
  app.addHook('onClose', async () => changes.close());

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
      // hijacked, the answer is written here: with the headers gathered so far (security-headers.ts)
      reply.raw.writeHead(200, { ...(reply.getHeaders() as OutgoingHttpHeaders), 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-accel-buffering': 'no' });
      // it ends when the client leaves or the token expires, whichever comes first
      await streamInstance(reply.raw, engine, changes, env, { record, audit, logic, mmd: (opts.diagram ?? mermaidDiagram)(logic) }, { until: who.expiresAt });
    },
  );
};
