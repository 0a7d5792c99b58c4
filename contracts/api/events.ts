import { z } from 'zod';
import { StorableJson, text } from './storable.ts';

/** `POST /v1/envs/{env}/events`: starts one instance per start trigger on `type` and delivers it through each message trigger, once per idempotency key. */
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
    /**
     * The messages its message triggers delivered, one per instance reached: `delivered` (its
     * waitFor step took it), `buffered` (it waits for the step), or `refused` with the code.
     */
    delivered: z.array(
      z.strictObject({
        workflowId: z.string(),
        message: z.string(),
        status: z.enum(['delivered', 'buffered', 'refused']),
        code: z.string().optional(),
      }),
    ),
    /** False when the event started nothing and reached no instance: it was recorded, and nothing happened. */
    matched: z.boolean(),
  })
  .meta({ id: 'IngestEventResponse' });
export type IngestEventResponse = z.infer<typeof IngestEventResponse>;
