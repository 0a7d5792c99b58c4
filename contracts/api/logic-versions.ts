import { z } from 'zod';
import { LogicId } from '../logic-version.ts';
import { refineDepth } from './storable.ts';

/** `POST /v1/envs/{env}/logic-versions`: a compiled LogicVersion and the WASM modules it names. */
export const PublishVersionRequest = z
  .strictObject({
    /** The compiled document, validated (hash included) by the engine. */
    logicVersion: z.record(z.string(), z.unknown()).superRefine(refineDepth),
    /** Module binaries by sha256 (hex), base64-encoded. Idempotent: a module already stored is skipped. */
    modules: z.record(z.string().regex(/^[0-9a-f]{64}$/, 'a module key is its sha256 in hex'), z.base64()).optional(),
  })
  .meta({ id: 'PublishVersionRequest' });
export type PublishVersionRequest = z.infer<typeof PublishVersionRequest>;

export const PublishVersionResponse = z
  .strictObject({
    /** `new` (201) or `unchanged` (200, the same hash was already published). */
    status: z.enum(['new', 'unchanged']),
    logicId: LogicId,
    version: z.int().min(1),
    hash: z.string(),
  })
  .meta({ id: 'PublishVersionResponse' });
export type PublishVersionResponse = z.infer<typeof PublishVersionResponse>;

export const VersionSummary = z
  .strictObject({
    logicId: LogicId,
    version: z.int().min(1),
    hash: z.string(),
    /** False once retired: new starts are refused while running instances finish (drain). */
    active: z.boolean(),
    publishedAt: z.string(),
    /** Instances of this version that have not ended. */
    inFlight: z.int().min(0),
  })
  .meta({ id: 'VersionSummary' });
export type VersionSummary = z.infer<typeof VersionSummary>;

export const VersionList = z.strictObject({ items: z.array(VersionSummary) }).meta({ id: 'VersionList' });
export type VersionList = z.infer<typeof VersionList>;

export const VersionDetail = z
  .strictObject({
    ...VersionSummary.shape,
    logicVersion: z.record(z.string(), z.unknown()),
    /** The Mermaid flowchart of the definition (`.mmd`). */
    diagram: z.string(),
  })
  .meta({ id: 'VersionDetail' });
export type VersionDetail = z.infer<typeof VersionDetail>;

/** `PATCH …/{logicId}/{version}`: retire (`false`, drain) or reactivate (`true`). */
export const PatchVersionRequest = z
  .strictObject({
    active: z.boolean(),
    /** Why, for the version's audit row. */
    reason: z.string().min(1).max(2000).optional(),
  })
  .meta({ id: 'PatchVersionRequest' });
export type PatchVersionRequest = z.infer<typeof PatchVersionRequest>;
