import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { EnvParams } from '../../../contracts/api/common.ts';
import {
  BackfillRequest,
  BackfillResponse,
  CreateScheduleRequest,
  DeleteScheduleResponse,
  Schedule,
  ScheduleActRequest,
  ScheduleDetail,
  ScheduleList,
  ScheduleParams,
  TriggerScheduleResponse,
} from '../../../contracts/api/schedules.ts';
import { grants } from '../../../contracts/scopes.ts';
import type { Engine } from '../../runtime/engine.ts';
import type { Schedule as ScheduleRow } from '../../runtime/schedules.ts';
import { NotFound } from '../../store/errors.ts';
import { principalOf, requireScope } from '../guard.ts';
import type { Principal } from '../auth.ts';
import { BEARER, PROBLEMS } from './shared.ts';

/**
 * Cron schedules: list, show (with recent ticks), create, pause, resume, delete, trigger now,
 * backfill a past range. Reading needs `flow:read` for the definition; every act needs
 * `flow:start` for it, since each one starts its instances or decides when they start
 * (`flow:admin` holds both). A scope narrowed to a glob sees and manages only matching
 * definitions' schedules; another's answers 404, as a missing one.
 */
export const scheduleRoutes: FastifyPluginAsyncZod<{ engine: Engine }> = async (app, { engine }) => {
  const s = engine.schedules;
  /** The schedule, once the caller may `scope` its definition; hidden (404) from one who may not read it. */
  const allowed = async (who: Principal, env: string, id: string, scope: 'flow:read' | 'flow:start') => {
    const row = await s.get(env, id, 50);
    if (!grants(who.scopes, 'flow:read', row.logicId) && !grants(who.scopes, scope, row.logicId)) throw new NotFound(`schedule ${id}`);
    requireScope(who, scope, row.logicId, `schedule ${id}`);
    return row;
  };
  const actor = (who: Principal, reason: string | undefined) => ({ actor: who.subject, reason: reason ?? null });
  const tags = ['schedules'];

  app.get(
    '/v1/envs/:env/schedules',
    { config: { scope: 'flow:read' }, schema: { tags, summary: 'List schedules', security: BEARER, params: EnvParams, response: { 200: ScheduleList, ...PROBLEMS } } },
    async (req) => {
      const who = principalOf(req);
      const items = await s.list(req.params.env);
      return { items: items.filter((x) => grants(who.scopes, 'flow:read', x.logicId)).map(wire) };
    },
  );

  app.get(
    '/v1/envs/:env/schedules/:id',
    {
      config: { scope: 'flow:read' },
      schema: { tags, summary: 'Show a schedule with its latest ticks', security: BEARER, params: ScheduleParams, response: { 200: ScheduleDetail, ...PROBLEMS } },
    },
    async (req) => {
      const row = await allowed(principalOf(req), req.params.env, req.params.id, 'flow:read');
      return { ...wire(row), ticks: row.ticks.map((t) => ({ ...t, tickAt: iso(t.tickAt), recordedAt: iso(t.recordedAt) })) };
    },
  );

  app.post(
    '/v1/envs/:env/schedules',
    {
      config: { scope: 'flow:start' },
      schema: { tags, summary: 'Create a schedule', security: BEARER, params: EnvParams, body: CreateScheduleRequest, response: { 201: Schedule, ...PROBLEMS } },
    },
    async (req, reply) => {
      const who = principalOf(req);
      const { reason, ...spec } = req.body;
      requireScope(who, 'flow:start', spec.logicId, `LogicVersion ${spec.logicId}`);
      const created = await s.create(req.params.env, spec, actor(who, reason));
      return reply.code(201).send(wire(created));
    },
  );

  for (const [verb, paused] of [
    ['pause', true],
    ['resume', false],
  ] as const) {
    app.post(
      `/v1/envs/:env/schedules/:id/${verb}`,
      {
        config: { scope: 'flow:start' },
        schema: { tags, summary: `${verb[0]!.toUpperCase()}${verb.slice(1)} a schedule`, security: BEARER, params: ScheduleParams, body: ScheduleActRequest.nullish(), response: { 200: Schedule, ...PROBLEMS } },
      },
      async (req) => {
        const who = principalOf(req);
        await allowed(who, req.params.env, req.params.id, 'flow:start');
        return wire(await s.setPaused(req.params.env, req.params.id, paused, actor(who, req.body?.reason)));
      },
    );
  }

  app.post(
    '/v1/envs/:env/schedules/:id/trigger',
    {
      config: { scope: 'flow:start' },
      schema: { tags, summary: 'Start one instance of the schedule now', security: BEARER, params: ScheduleParams, body: ScheduleActRequest.nullish(), response: { 201: TriggerScheduleResponse, ...PROBLEMS } },
    },
    async (req, reply) => {
      const who = principalOf(req);
      await allowed(who, req.params.env, req.params.id, 'flow:start');
      const t = await s.trigger(req.params.env, req.params.id, actor(who, req.body?.reason));
      return reply.code(201).send({ workflowId: t.workflowId, tickAt: iso(t.tickAt) });
    },
  );

  app.post(
    '/v1/envs/:env/schedules/:id/backfill',
    {
      config: { scope: 'flow:start' },
      schema: { tags, summary: 'Start (or list, with dryRun) the ticks of a past range', security: BEARER, params: ScheduleParams, body: BackfillRequest, response: { 200: BackfillResponse, ...PROBLEMS } },
    },
    async (req) => {
      const who = principalOf(req);
      await allowed(who, req.params.env, req.params.id, 'flow:start');
      const { from, to, dryRun, reason } = req.body;
      const r = await s.backfill(req.params.env, req.params.id, { from: new Date(from), to: new Date(to), dryRun: dryRun ?? false }, actor(who, reason));
      return { dryRun: r.dryRun, ticks: r.ticks.map((t) => ({ ...t, tickAt: iso(t.tickAt) })) };
    },
  );

  app.delete(
    '/v1/envs/:env/schedules/:id',
    {
      config: { scope: 'flow:start' },
      schema: { tags, summary: 'Delete a schedule made through the API', security: BEARER, params: ScheduleParams, response: { 200: DeleteScheduleResponse, ...PROBLEMS } },
    },
    async (req) => {
      const who = principalOf(req);
      await allowed(who, req.params.env, req.params.id, 'flow:start');
      await s.remove(req.params.env, req.params.id, actor(who, undefined));
      return { id: req.params.id, deleted: true as const };
    },
  );
};

const iso = (d: Date) => d.toISOString();
const isoOrNull = (d: Date | null) => (d === null ? null : d.toISOString());

function wire(row: ScheduleRow) {
  return {
    id: row.id,
    logicId: row.logicId,
    origin: row.origin,
    cron: row.cron,
    timezone: row.timezone,
    overlap: row.overlap,
    catchUp: row.catchUp,
    input: row.input,
    paused: row.paused,
    nextAt: isoOrNull(row.nextAt),
    bufferedAt: isoOrNull(row.bufferedAt),
    lastInstanceId: row.lastInstanceId,
    createdAt: iso(row.createdAt),
    updatedAt: iso(row.updatedAt),
  };
}
