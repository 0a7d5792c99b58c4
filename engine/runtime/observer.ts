import type { LogicVersion } from '../../contracts/index.ts';
import type { Instance } from '../core/instance.ts';
import type { Transition } from '../core/transition.ts';
import type { EffectResult } from '../executors/index.ts';
import type { PermitNeed, PermitWait } from '../store/permits.ts';
import type { Stored } from '../store/rows.ts';
import type { SlaBreachFired } from '../store/timers.ts';

/** Hooks for logs, timelines and tests; none of them may throw. */
export interface TransitionObserver {
  /** Called after each commit attempt; `committed` is false when the write was fenced out. */
  onTransition?(from: Instance, t: Transition, committed: boolean): void;
  /**
   * An attempt's executor returned, `seconds` after the attempt's turn came (its outcome is
   * committed next). Work started ahead of the turn — a func step's module run, during the commit
   * before — is not counted.
   */
  onAttempt?(logic: LogicVersion, instance: Instance, result: EffectResult, seconds: number): void;
  /** A claimer is applying the wakes (fired timers, children ended) of a woken instance. */
  onWake?(logic: LogicVersion, stored: Stored): void;
  /** An SLA timer fired and recorded a breach (once per instance and step, across all processes). */
  onSlaBreached?(breach: SlaBreachFired): void;
  /** An unexpected error; `workflowId` is null for errors of the poll loop (database away). */
  onError?(workflowId: string | null, err: unknown): void;
  /**
   * A heartbeat found the lease taken: the attempt in flight was abandoned, its answer not
   * committed. `held` is the instance as its holder last had it (claimed, or last committed).
   */
  onLeaseLost?(workflowId: string, held?: Instance): void;
  /** The instance's work needed permits (runtime/permits.ts): taken (`wait` null), or it waits for `wait.resource`. */
  onPermits?(logic: LogicVersion, instance: Instance, needs: readonly PermitNeed[], wait: PermitWait | null): void;
}
