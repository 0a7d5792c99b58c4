import { canonicalJson } from '../../contracts/canonical-json.ts';
import type { StepOutcome } from '../../contracts/index.ts';
import { CallbackAnsweredDifferently } from './errors.ts';

/** The completion applied for an attempt, and the state its decision left the instance in. */
export interface AppliedCallback {
  outcome: StepOutcome;
  state: string;
}

/**
 * A callback for an attempt that is over (the core refused it as stale), judged against the
 * completion applied for that attempt: the same body answers as the first delivery did (the state
 * returned); another body is FLOW_CALLBACK_ANSWERED_DIFFERENTLY; when no completion ended the
 * attempt (it timed out, was retried, rewound or cancelled) the stale refusal stands.
 */
export function answerRepeatedCallback(workflowId: string, applied: AppliedCallback | null, outcome: StepOutcome, stale: unknown): string {
  if (applied === null) throw stale;
  if (canonicalJson(applied.outcome) !== canonicalJson(outcome)) throw new CallbackAnsweredDifferently(workflowId);
  return applied.state;
}
