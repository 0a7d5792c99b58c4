import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { EnvParams } from '../../../contracts/api/common.ts';
import { Overview } from '../../../contracts/api/overview.ts';
import type { Engine } from '../../runtime/engine.ts';
import { readOverview } from '../../store/overview.ts';
import { readSlaBreaches } from '../../store/sla-breaches.ts';
import { readCircuits } from '../../store/circuits.ts';
import { inEnv } from '../../store/tx.ts';
import { principalOf, requireScope } from '../guard.ts';
import { limitInfo } from './limits.ts';
import { BEARER, PROBLEMS } from './shared.ts';

/** The console's home page in one request: counts by state per version, stuck instances, dead letters, decisions waiting. */
export const overviewRoutes: FastifyPluginAsyncZod<{ engine: Engine }> = async (app, { engine }) => {
  app.get(
    '/v1/envs/:env/overview',
    {
      config: { scope: 'flow:read' },
      schema: {
        tags: ['console'],
        summary: 'Counts by state per version, stuck instances, dead letters, decisions waiting, queue depth, SLA breaches',
        security: BEARER,
        params: EnvParams,
        response: { 200: Overview, ...PROBLEMS },
      },
    },
    async (req) => {
      const env = req.params.env;
      requireScope(principalOf(req), 'flow:read', undefined, 'the overview of every definition');
      const [overview, stuck, dead, slaBreaches, limits, circuits] = await Promise.all([
        inEnv(engine.db, env, (c) => readOverview(c)),
        engine.ops.listStuck({ env, limit: 50 }),
        engine.ops.listDeadLettered({ env, limit: 50 }),
        inEnv(engine.db, env, (c) => readSlaBreaches(c)),
        engine.permits.list(env),
        inEnv(engine.db, env, (c) => readCircuits(c)),
      ]);
      const brief = ({ ctx: _ctx, ...rest }: (typeof stuck)[number]) => rest;
      const pausedHandlers = circuits
        .filter((k) => k.state === 'open')
        .map((k) => ({ handler: k.handler, reason: 'circuit_open', failures: k.failures, lastError: k.reason, openedAt: k.openedAt, openUntil: k.openUntil }));
      return { ...overview, stuck: stuck.map(brief), deadLettered: dead.map(brief), slaBreaches, limits: limits.map(limitInfo), pausedHandlers };
    },
  );
};
