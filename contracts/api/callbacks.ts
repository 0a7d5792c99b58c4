import { z } from 'zod';
import { StorableJson, text } from './storable.ts';

export const CallbackParams = z.strictObject({ resumeToken: text(1, 300) });

/**
 * `POST /v1/callbacks/{resumeToken}`: the owning service completes a step it answered with
 * `202 {"status":"waiting"}` — with its output, or with an error (retryable or not).
 */
export const CallbackRequest = z
  .union([
    z.strictObject({ output: StorableJson }),
    z.strictObject({
      error: z.strictObject({ code: text(1, 200), message: text(0, 5000) }),
      /** Retry the step under its retry policy. (Default: false) */
      retryable: z.boolean().optional(),
    }),
  ])
  .meta({ id: 'CallbackRequest' });
export type CallbackRequest = z.infer<typeof CallbackRequest>;

/** Only what the caller needs: its token proves one attempt, not a right to read the instance. */
export const CallbackResponse = z.strictObject({ workflowId: z.string(), state: z.string() }).meta({ id: 'CallbackResponse' });
export type CallbackResponse = z.infer<typeof CallbackResponse>;
