import { z } from 'zod';
import { StepName } from '../logic-version.ts';
import { Reason } from './common.ts';
import { StorableJson } from './storable.ts';

/** Fields every verb body carries: why (audited), and whether to only preview. */
const verbBase = {
  reason: Reason,
  /** Change nothing; answer what would run again and under which idempotency keys. (Default: false) */
  dryRun: z.boolean().optional(),
};

export const RetryRequest = z.strictObject({ ...verbBase }).meta({ id: 'RetryRequest' });
export const RepairRequest = z
  .strictObject({
    ...verbBase,
    rewindTo: StepName,
    input: StorableJson.optional(),
    /**
     * Undo first what the rewound steps did: their registered compensations run, last first, under
     * their own `:compensate` keys, before the re-run. (Default: false — those effects stay in place.)
     */
    compensateRewound: z.boolean().optional(),
  })
  .meta({ id: 'RepairRequest' });
export const CancelRequest = z
  .strictObject({ ...verbBase, compensate: z.boolean().optional() })
  .meta({ id: 'CancelRequest' });
export const ForceCompleteRequest = z
  .strictObject({ ...verbBase, step: StepName, output: StorableJson })
  .meta({ id: 'ForceCompleteRequest' });
export const ReplayRequest = z.strictObject({ ...verbBase, step: StepName }).meta({ id: 'ReplayRequest' });

export type RetryRequest = z.infer<typeof RetryRequest>;
export type RepairRequest = z.infer<typeof RepairRequest>;
export type CancelRequest = z.infer<typeof CancelRequest>;
export type ForceCompleteRequest = z.infer<typeof ForceCompleteRequest>;
export type ReplayRequest = z.infer<typeof ReplayRequest>;

/** The verbs of the HTTP API, by path segment, with their bodies and scopes. */
export const VERBS = {
  retry: { body: RetryRequest, scope: 'flow:retry' },
  repair: { body: RepairRequest, scope: 'flow:repair' },
  cancel: { body: CancelRequest, scope: 'flow:cancel' },
  'force-complete': { body: ForceCompleteRequest, scope: 'flow:force-complete' },
  replay: { body: ReplayRequest, scope: 'flow:replay' },
} as const;
export type VerbName = keyof typeof VERBS;

/** A dry run's answer: what the verb would run, in order, and where the run would stop. */
export const VerbPreview = z
  .strictObject({
    dryRun: z.literal(true),
    verb: z.string(),
    /** The generation the re-run steps would carry (part of their idempotency keys). */
    generation: z.int().min(0),
    steps: z.array(
      z.strictObject({
        step: z.string(),
        kind: z.string(),
        callsOut: z.boolean(),
        idempotencyKey: z.string().nullable(),
        compensation: z.boolean().optional(),
      }),
    ),
    /** Compensations the re-run steps would register. */
    compensations: z.array(z.string()),
    /** Effects of the rewound steps that stay in place (repair or replay without `compensateRewound`), with their compensation. */
    keptEffects: z.array(
      z.strictObject({ step: z.string(), generation: z.int().min(0), compensation: z.string(), compensationKey: z.string() }),
    ),
    stopsAt: z.strictObject({ state: z.string(), step: z.string().nullable() }),
  })
  .meta({ id: 'VerbPreview' });
export type VerbPreview = z.infer<typeof VerbPreview>;
