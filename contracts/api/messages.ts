import { z } from 'zod';
import { MessageName } from '../logic-version.ts';
import { EnvId } from './common.ts';
import { StorableJson, text } from './storable.ts';

export const MessageParams = z.strictObject({ env: EnvId, id: z.uuid(), name: MessageName });
export type MessageParams = z.infer<typeof MessageParams>;

export const MessageHeaders = z.object({
  'idempotency-key': text(1, 200).describe('Required. A repeat of the key for the same instance is answered with the first answer and changes nothing'),
});

/** `POST …/workflows/{id}/messages/{name}`: the body is the payload (any JSON; checked against the waitFor step's schema). */
export const MessageRequest = StorableJson.meta({ id: 'MessageRequest' });

/**
 * The answer to a delivery: `delivered` (200), handed to the waitFor step the instance was parked
 * on; `buffered` (202), kept in arrival order until the instance reaches a waitFor step of that name.
 */
export const MessageAnswer = z
  .strictObject({ workflowId: z.uuid(), message: MessageName, status: z.enum(['delivered', 'buffered']) })
  .meta({ id: 'MessageAnswer' });
export type MessageAnswer = z.infer<typeof MessageAnswer>;
