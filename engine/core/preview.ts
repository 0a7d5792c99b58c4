import type { LogicVersion } from '../../contracts/index.ts';
import { onOutcome } from './flow.ts';
import type { Instance } from './instance.ts';
import type { Transition } from './transition.ts';
import { type RewindArgs, rewind } from './verbs.ts';

export interface PreviewStep {
  step: string;
  kind: string;
  /** True for steps that call out (proxy, http, func): they would hit the outside world again. */
  callsOut: boolean;
  /** The new key such a call would carry. */
  idempotencyKey: string | null;
}

export interface Preview {
  generation: number;
  /** Steps that would run again, in order, assuming each call answers as it did last time. */
  steps: PreviewStep[];
  /** Compensations those steps would register. */
  compensations: string[];
  /** Where the simulation stopped: a park (`waiting`), the end, or a failure. */
  stopsAt: { state: string; step: string | null };
}

const MAX_SIMULATED = 500;

/**
 * Dry run of `repair` / `replayFrom`: runs the real core on a copy, answering every call with the
 * output that step produced before (or null), and lists what would run. Nothing is written and
 * nothing is called. Where outputs would differ, the real run may branch differently.
 */
export async function previewRewind(
  logic: LogicVersion,
  inst: Instance,
  cause: 'verb.repair' | 'verb.replay_from',
  args: RewindArgs,
): Promise<Preview> {
  const steps: PreviewStep[] = [];
  const registeredBefore = inst.ctx.compensations.length;
  let t: Transition = await rewind(logic, inst, cause, args);
  for (let n = 0; n < MAX_SIMULATED; n++) {
    for (const a of t.attempts) {
      if (a.op !== 'insert' || a.kind !== 'step') continue;
      const kind = logic.steps[a.step]!.kind;
      const callsOut = kind === 'proxy' || kind === 'http' || kind === 'func';
      if (!callsOut || a.attempt === 1) steps.push({ step: a.step, kind, callsOut, idempotencyKey: callsOut ? a.idempotencyKey : null });
    }
    const running = t.instance.ctx.running;
    if (running === null || running.kind !== 'step' || !['pending', 'processing'].includes(t.instance.state)) break;
    const output = inst.ctx.outputs[running.step] ?? null;
    t = await onOutcome(logic, t.instance, { status: 'succeeded', output });
  }
  return {
    generation: t.instance.generation,
    steps,
    compensations: t.instance.ctx.compensations.slice(registeredBefore).map((r) => r.step),
    stopsAt: { state: t.instance.state, step: t.instance.currentStep },
  };
}
