import { z } from 'zod';
import { Json } from '../record.ts';
import { StepName } from '../logic-version.ts';
import { EnvId } from './common.ts';

export const DecisionParams = z.strictObject({ env: EnvId, id: z.uuid(), step: StepName });
export type DecisionParams = z.infer<typeof DecisionParams>;

/** `POST …/workflows/{id}/decisions/{step}`: the approver is the token's subject, never a field. */
export const DecisionRequest = z
  .strictObject({
    option: z.string().min(1).max(200),
    payload: Json.optional(),
    reason: z.string().min(1).max(2000).optional(),
  })
  .meta({ id: 'DecisionRequest' });
export type DecisionRequest = z.infer<typeof DecisionRequest>;
