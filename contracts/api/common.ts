import { z } from 'zod';
import { LogicId } from '../logic-version.ts';
import { PgIntParam, text } from './storable.ts';

/** An environment id, as it appears in paths and in a token's `envs` claim. */
export const EnvId = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/, 'an env id matches ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$');

export const EnvParams = z.strictObject({ env: EnvId });
export type EnvParams = z.infer<typeof EnvParams>;

export const WorkflowParams = z.strictObject({ env: EnvId, id: z.uuid() });
export type WorkflowParams = z.infer<typeof WorkflowParams>;

export const VersionParams = z.strictObject({ env: EnvId, logicId: LogicId, version: PgIntParam });
export type VersionParams = z.infer<typeof VersionParams>;

/** Every verb says why: the reason lands in the audit row. */
export const Reason = text(1, 2000);
