import type { StepDef } from '../../contracts/index.ts';
import { durationMs } from './durations.ts';
import { MAX_WAIT_MS } from './storable.ts';
import type { Draft } from './transition.ts';

/**
 * Service levels (docs/sla.md) ride on the timer machinery: reaching the start of an instance, or
 * a step with `sla` for the first time in a generation, arms one timer `within` later. It wakes
 * nothing; when it fires, fire_due_timers() records a breach if the instance (or that step) is
 * still not done. An ending drops it with the instance's other timers. Parked, waiting and
 * retrying time all count, since the timer runs on wall time from the moment it was armed.
 */
export function armWorkflowSla(d: Draft): void {
  const sla = d.logic.sla;
  if (sla !== undefined) d.commands.push({ type: 'sla', step: null, within: sla.within, delayMs: slaMs(sla.within) });
}

/** Arms `step`'s SLA when it is reached for the first time in this generation (retries and waits keep the first). */
export function armStepSla(d: Draft, name: string, step: StepDef): void {
  if (step.sla === undefined || d.ctx.attempts[name] !== undefined) return;
  d.commands.push({ type: 'sla', step: name, within: step.sla.within, delayMs: slaMs(step.sla.within) });
}

/** An SLA longer than the engine schedules waits as long as it may: it can never be breached sooner. */
function slaMs(within: string): number {
  return Math.min(durationMs(within), MAX_WAIT_MS);
}
