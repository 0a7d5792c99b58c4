import { z } from 'zod';
import { Json } from '../record.ts';

/** `POST /v1/envs/{env}/events`: starts one instance per trigger on `type`, once per idempotency key. */
export const IngestEventBody = z
  .strictObject({
    type: z.string().min(1).max(200),
    payload: Json.optional(),
    idempotencyKey: z.string().min(1).max(200),
  })
  .meta({ id: 'IngestEventRequest' });
export type IngestEventBody = z.infer<typeof IngestEventBody>;

export const IngestEventResponse = z
  .strictObject({
    ids: z.array(z.string()),
    created: z.boolean(),
    /** False when no active version has a trigger on this type: the event was recorded and started nothing. */
    matched: z.boolean(),
  })
  .meta({ id: 'IngestEventResponse' });
export type IngestEventResponse = z.infer<typeof IngestEventResponse>;
