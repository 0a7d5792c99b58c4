import { z } from 'zod';
import { LogicId, VersionNumber } from '../logic-version.ts';
import { EnvId } from './common.ts';
import { refineDepth } from './storable.ts';
import { VerbPreview } from './verbs.ts';

/** The most ended instances one report replays. */
export const MAX_REPLAYS = 100;

export const CompatibilityParams = z.strictObject({ env: EnvId, logicId: LogicId });

/** `POST /v1/envs/{env}/logic-versions/{logicId}/compatibility`: a candidate, checked against the live instances of a published version. */
export const CompatibilityRequest = z
  .strictObject({
    /** The candidate LogicVersion, validated (hash included) as for publish; it is not published. */
    logicVersion: z.record(z.string(), z.unknown()).superRefine(refineDepth),
    /** The published version whose live instances are checked. (Default: the highest active version below the candidate's) */
    against: VersionNumber.optional(),
    /** Also replay this many of the last ended instances of `against` on the candidate, and say where each would have decided otherwise. (Default: 0) */
    replay: z.int().min(0).max(MAX_REPLAYS).optional(),
  })
  .meta({ id: 'CompatibilityRequest' });
export type CompatibilityRequest = z.infer<typeof CompatibilityRequest>;

const Verdict = z.enum(['safe', 'unsafe']);

export const CompatibilityReason = z
  .strictObject({
    /** A stable `FLOW_COMPAT_*` code (docs/errors.md). */
    code: z.string(),
    step: z.string(),
    /** The expression that reads the step's output, for output reasons (`steps.charge.input`, `output`). */
    readBy: z.string().optional(),
    message: z.string(),
  })
  .meta({ id: 'CompatibilityReason' });

export const CompatibilityGroup = z
  .strictObject({
    state: z.enum(['pending', 'processing', 'waiting', 'compensating']),
    currentStep: z.string().nullable(),
    running: z.enum(['step', 'compensation']).nullable(),
    generation: z.int().min(0),
    /** Steps whose output the instances hold. */
    outputs: z.array(z.string()),
    /** Steps whose compensation is registered and still to run. */
    compensations: z.array(z.string()),
    /** Instances of this shape. */
    count: z.int().min(1),
    /** One of them: the one `next` was simulated for. */
    representative: z.uuid(),
    verdict: Verdict,
    reasons: z.array(CompatibilityReason),
    /**
     * What the representative would run next on the candidate, each call answered as it was
     * before (or null), a parked decision with its first option; null when its step is not in
     * the candidate.
     */
    next: VerbPreview.pick({ generation: true, steps: true, compensations: true, stopsAt: true })
      .extend({
        /** What the simulation assumed of the wait the representative is parked on: `decision approval = approve` (its first option), `reserve answered as before`; null when it was not parked. */
        assumes: z.string().nullable(),
      })
      .nullable(),
  })
  .meta({ id: 'CompatibilityGroup' });
export type CompatibilityGroup = z.infer<typeof CompatibilityGroup>;

export const CompatibilityReport = z
  .strictObject({
    logicId: LogicId,
    candidate: z.strictObject({ version: z.int().min(1), hash: z.string() }),
    /** The version compared against; null when there is none (no active version below the candidate): nothing to check. */
    against: z.strictObject({ version: z.int().min(1), hash: z.string() }).nullable(),
    /** `unsafe` when any group is, or when groups were left out (`truncated`). */
    verdict: Verdict,
    /** Live instances of `against`, and how many of them are in unsafe groups. */
    live: z.int().min(0),
    unsafe: z.int().min(0),
    /** The groups, largest first. */
    groups: z.array(CompatibilityGroup),
    /** More groups exist than were listed (and evaluated): the verdict cannot be `safe`. */
    truncated: z.boolean(),
    /** Present when `replay` was asked: the last ended instances of `against` replayed on the candidate (they do not change the verdict). */
    replays: z
      .strictObject({
        /** Ended instances replayed (at most `replay`; fewer when fewer have ended). */
        replayed: z.int().min(0),
        /** Those the candidate decides exactly as the recorded run. */
        same: z.int().min(0),
        /** Erased instances, whose inputs are tombstones: nothing to replay. */
        erased: z.int().min(0),
        /** Where each other one would first have decided otherwise (`FLOW_REPLAY_DIVERGED`'s details). */
        diverged: z.array(
          z.strictObject({
            id: z.uuid(),
            /** The index of the recorded event, or the number of events when only the ending differs. */
            index: z.int().min(0),
            event: z.string(),
            step: z.string().nullable(),
            attempt: z.int().nullable(),
            /** The first field of the decision that differs (`attempts[1].state`, `currentStep`). */
            field: z.string(),
          }),
        ),
      })
      .optional(),
  })
  .meta({ id: 'CompatibilityReport' });
export type CompatibilityReport = z.infer<typeof CompatibilityReport>;
