import { z } from 'zod';
import { StepName } from '../logic-version.ts';
import { EnvId } from './common.ts';
import { StorableJson, text } from './storable.ts';

export const DecisionParams = z.strictObject({ env: EnvId, id: z.uuid(), step: StepName });
export type DecisionParams = z.infer<typeof DecisionParams>;

/** `POST …/workflows/{id}/decisions/{step}`: the approver is the token's subject, never a field. */
export const DecisionRequest = z
  .strictObject({
    option: text(1, 200),
    payload: StorableJson.optional(),
    reason: text(1, 2000).optional(),
  })
  .meta({ id: 'DecisionRequest' });
export type DecisionRequest = z.infer<typeof DecisionRequest>;
