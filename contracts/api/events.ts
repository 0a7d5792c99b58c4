import { z } from 'zod';
import { StorableJson, text } from './storable.ts';

/** `POST /v1/envs/{env}/events`: starts one instance per trigger on `type`, once per idempotency key. */
export const IngestEventBody = z
  .strictObject({
    type: text(1, 200),
    payload: StorableJson.optional(),
    idempotencyKey: text(1, 200),
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
