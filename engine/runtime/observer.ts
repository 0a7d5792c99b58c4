import type { Instance } from '../core/instance.ts';
import type { Transition } from '../core/transition.ts';

/** Hooks for logs, timelines and tests; none of them may throw. */
export interface TransitionObserver {
  /** Called after each commit attempt; `committed` is false when the write was fenced out. */
  onTransition?(from: Instance, t: Transition, committed: boolean): void;
  /** An unexpected error; `workflowId` is null for errors of the poll loop (database away). */
  onError?(workflowId: string | null, err: unknown): void;
  /** A heartbeat found the lease taken: the attempt in flight was abandoned, its answer not committed. */
  onLeaseLost?(workflowId: string): void;
}
