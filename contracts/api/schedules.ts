import { z } from 'zod';
import { IsoDuration, LogicId, ScheduleOverlap } from '../logic-version.ts';
import { EnvId, Reason } from './common.ts';
import { StorableJson } from './storable.ts';

/** A schedule's id: `<logicId>:<name>` for a declared one, the creator's choice for one made through the API. */
export const ScheduleId = z.string().regex(/^[a-z0-9][a-z0-9_.:-]{0,127}$/i, 'a schedule id matches ^[a-z0-9][a-z0-9_.:-]{0,127}$');

export const ScheduleParams = z.strictObject({ env: EnvId, id: ScheduleId });
export type ScheduleParams = z.infer<typeof ScheduleParams>;

/** `POST /v1/envs/{env}/schedules`: a schedule of the definition's active version. */
export const CreateScheduleRequest = z
  .strictObject({
    id: ScheduleId,
    logicId: LogicId,
    /** Five fields, or six with seconds, as croner reads them. */
    cron: z.string().min(1).max(200),
    /** IANA time zone. (Default: UTC) */
    timezone: z.string().min(1).max(100).optional(),
    /** (Default: skip) */
    overlap: ScheduleOverlap.optional(),
    /** How late a tick may still start; older missed ticks are recorded as skipped. (Default: PT5M) */
    catchUp: IsoDuration.optional(),
    /** The input of every instance it starts. (Default: {}) */
    input: StorableJson.optional(),
    reason: Reason.optional(),
  })
  .meta({ id: 'CreateScheduleRequest' });
export type CreateScheduleRequest = z.infer<typeof CreateScheduleRequest>;

export const Schedule = z
  .strictObject({
    id: ScheduleId,
    logicId: LogicId,
    /** `declared` by the definition's active version (follows it), or made through the `api`. */
    origin: z.enum(['declared', 'api']),
    cron: z.string(),
    timezone: z.string(),
    overlap: ScheduleOverlap,
    catchUp: z.string(),
    input: z.unknown(),
    paused: z.boolean(),
    /** The next tick, ISO 8601; null when the pattern has no more. */
    nextAt: z.string().nullable(),
    /** A tick `buffer_one` holds until the last instance ends. */
    bufferedAt: z.string().nullable(),
    lastInstanceId: z.string().nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'Schedule' });
export type Schedule = z.infer<typeof Schedule>;

export const ScheduleTick = z
  .strictObject({
    tickAt: z.string(),
    /** `started`, `skipped_catch_up` (older than catchUp), `skipped_overlap`, `buffered`, or `failed` (see `error`). */
    outcome: z.enum(['started', 'skipped_catch_up', 'skipped_overlap', 'buffered', 'failed']),
    via: z.enum(['timer', 'trigger', 'backfill']),
    workflowId: z.string().nullable(),
    error: z.strictObject({ code: z.string(), message: z.string() }).nullable(),
    recordedAt: z.string(),
  })
  .meta({ id: 'ScheduleTick' });

export const ScheduleDetail = z.strictObject({ ...Schedule.shape, ticks: z.array(ScheduleTick) }).meta({ id: 'ScheduleDetail' });
export type ScheduleDetail = z.infer<typeof ScheduleDetail>;

export const ScheduleList = z.strictObject({ items: z.array(Schedule) }).meta({ id: 'ScheduleList' });
export type ScheduleList = z.infer<typeof ScheduleList>;

/** Pause, resume, trigger, delete: why, for the audit row. */
export const ScheduleActRequest = z.strictObject({ reason: Reason.optional() }).meta({ id: 'ScheduleActRequest' });
export type ScheduleActRequest = z.infer<typeof ScheduleActRequest>;

export const TriggerScheduleResponse = z.strictObject({ workflowId: z.string(), tickAt: z.string() }).meta({ id: 'TriggerScheduleResponse' });

/** `POST …/schedules/{id}/backfill`: start the ticks of a past range (inclusive), or list them (`dryRun`). */
export const BackfillRequest = z
  .strictObject({
    from: z.iso.datetime({ offset: true }),
    to: z.iso.datetime({ offset: true }),
    /** (Default: false) */
    dryRun: z.boolean().optional(),
    reason: Reason.optional(),
  })
  .meta({ id: 'BackfillRequest' });
export type BackfillRequest = z.infer<typeof BackfillRequest>;

export const BackfillResponse = z
  .strictObject({
    dryRun: z.boolean(),
    /** Each tick of the range; `created` false: its instance had started before (same idempotency key). */
    ticks: z.array(z.strictObject({ tickAt: z.string(), workflowId: z.string().nullable(), created: z.boolean() })),
  })
  .meta({ id: 'BackfillResponse' });
export type BackfillResponse = z.infer<typeof BackfillResponse>;

export const DeleteScheduleResponse = z.strictObject({ id: ScheduleId, deleted: z.literal(true) }).meta({ id: 'DeleteScheduleResponse' });
