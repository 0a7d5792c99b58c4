import type { Action, LogicVersion } from '../../contracts/index.ts';
import { onOutcome, rewoundRegistrations } from './flow.ts';
import type { Instance } from './instance.ts';
import { keys } from './retry.ts';
import type { Transition } from './transition.ts';
import { schemaProblems } from './schemas.ts';
import { type RewindArgs, rewind } from './verbs.ts';
import { Refused } from './errors.ts';
import { onResume } from './wake.ts';

export interface PreviewStep {
  step: string;
  kind: string;
  /** True for steps that call out (proxy, http, func): they would hit the outside world again. */
  callsOut: boolean;
  /** The key such a call would carry. */
  idempotencyKey: string | null;
  /** True when this is the run of a step's compensation rather than the step. */
  compensation?: boolean;
}

export interface Preview {
  generation: number;
  /** Steps (and compensations) that would run, in order, assuming each call answers as it did last time. */
  steps: PreviewStep[];
  /** Compensations those steps would register. */
  compensations: string[];
  /**
   * Effects of the steps a rewind re-runs that stay in place (a repair or replay without
   * `compensateRewound`), each with the compensation registered to undo it; empty for other verbs.
   */
  keptEffects: KeptEffect[];
  /** Where the simulation stopped: a park (`waiting`), the end, a failure, or a call it cannot answer (`pending`: the step never answered and its schema refuses null). */
  stopsAt: { state: string; step: string | null };
}

export interface KeptEffect {
  step: string;
  /** The generation the effect was made in: its key, and its compensation's key, carry it. */
  generation: number;
  /** The registered compensation, e.g. `proxy payments /funds/release`. */
  compensation: string;
  /** The key the compensation would carry if it ran. */
  compensationKey: string;
}

const MAX_SIMULATED = 500;
const CALLS_OUT = new Set(['proxy', 'http', 'func']);

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
  const preview = await simulate(logic, inst, await rewind(logic, inst, cause, args));
  if (args.compensateRewound === true) return preview;
  const keptEffects = rewoundRegistrations(inst, args.step).map((i) => {
    const reg = inst.ctx.compensations[i]!;
    return {
      step: reg.step,
      generation: reg.generation,
      compensation: describeAction(logic, logic.steps[reg.step]?.compensate),
      compensationKey: keys.compensation(inst.id, reg.step, reg.generation, reg.visit),
    };
  });
  return { ...preview, keptEffects };
}

/**
 * Follows a verb's transition through the real core, answering each call — step or compensation
 * — with the output it produced before (or null), and lists every run that would call out, under
 * the key it would carry. Used for the dry run of every verb.
 */
export async function simulate(logic: LogicVersion, inst: Instance, first: Transition): Promise<Preview> {
  const steps: PreviewStep[] = [];
  const registeredBefore = inst.ctx.compensations.length;
  let t = first;
  for (let n = 0; n < MAX_SIMULATED; n++) {
    for (const a of t.attempts) {
      if (a.op !== 'insert') continue;
      // Every answer here succeeds, so each inserted row is a run of its own — whatever its
      // attempt number (a retried step, a loop's next visit) — and is listed.
      if (a.kind === 'compensation') {
        const kind = logic.steps[a.step]?.compensate?.kind ?? 'proxy';
        steps.push({ step: a.step, kind, callsOut: true, idempotencyKey: a.idempotencyKey, compensation: true });
        continue;
      }
      const kind = logic.steps[a.step]!.kind;
      const callsOut = CALLS_OUT.has(kind);
      steps.push({ step: a.step, kind, callsOut, idempotencyKey: callsOut ? a.idempotencyKey : null });
    }
    const running = t.instance.ctx.running;
    if (running === null || !['pending', 'processing', 'compensating'].includes(t.instance.state)) break;
    const output = running.kind === 'step' ? (inst.ctx.outputs[running.step] ?? null) : null;
    // A step that never answered, whose schema refuses a null answer, would "fail" only in the
    // simulation: stop at it rather than show an unwinding the real run need not take.
    if (running.kind === 'step' && !(running.step in inst.ctx.outputs) && unknownAnswer(logic, running.step)) break;
    t = await onOutcome(logic, t.instance, { status: 'succeeded', output });
  }
  return {
    generation: t.instance.generation,
    steps,
    compensations: t.instance.ctx.compensations.slice(registeredBefore).map((r) => r.step),
    keptEffects: [],
    stopsAt: { state: t.instance.state, step: t.instance.currentStep },
  };
}

/** What the simulation of a continuing instance assumed of the wait it is parked on, if anything. */
export interface ContinuePreview extends Preview {
  /** `decision approval = approve` (the first option), `reserve answered as before`; null when it was not parked. */
  assumes: string | null;
}

/**
 * What an instance would run next were it continuing on `to` (a candidate version) at the step it
 * is at: the simulation of `simulate`, on a copy pinned to `to`. A parked decision is answered
 * with its first option by the core's own resume; any other wait ends with the answer the step
 * gave before (or null). The caller has checked that the step is in `to`. Nothing is written and
 * nothing is called.
 */
export async function previewContinue(to: LogicVersion, inst: Instance): Promise<ContinuePreview> {
  const moved: Instance = { ...inst, version: to.version, logicHash: to.hash };
  const running = moved.ctx.running;
  const stays = (): ContinuePreview => ({ generation: inst.generation, steps: [], compensations: [], keptEffects: [], stopsAt: { state: inst.state, step: inst.currentStep }, assumes: null });
  if (moved.state === 'waiting' && running !== null) {
    const step = to.steps[running.step];
    if (step?.kind === 'decision') {
      const option = step.options[0]!;
      const approver = { subject: 'compatibility-report', scopes: step.approverScope === undefined ? [] : [step.approverScope] };
      let first: Transition;
      try {
        first = await onResume(to, moved, { step: running.step, option, approver });
      } catch (err) {
        // a decision whose payload schema requires fields: no answer can be made up for it
        if (err instanceof Refused) return stays();
        throw err;
      }
      return { ...(await simulate(to, moved, first)), assumes: `decision ${running.step} = ${option}` };
    }
    moved.state = 'processing';
  }
  const first: Transition = { instance: moved, cause: 'step_succeeded', attempts: [], commands: [], runAfterMs: null, outputsChanged: [] };
  const preview = await simulate(to, moved, first);
  // stopped at once, at the step it is at: its answer is unknown, so it stays as it is
  if (preview.steps.length === 0 && preview.stopsAt.step === inst.currentStep && preview.stopsAt.state === moved.state) return stays();
  return { ...preview, assumes: inst.state === 'waiting' && running !== null ? `${running.step} answered as before` : null };
}

function unknownAnswer(logic: LogicVersion, step: string): boolean {
  const schema = logic.steps[step]?.output;
  return schema !== undefined && schemaProblems(schema, null).length > 0;
}

/** An action as an operator reads it: `proxy <handler> <path>`, `http <METHOD> <url>`, `func <module>`. */
function describeAction(logic: LogicVersion, action: Action | undefined): string {
  if (action === undefined) return 'none';
  if (action.kind === 'proxy') return `proxy ${action.handler ?? logic.domain} ${action.path}`;
  if (action.kind === 'http') return `http ${action.method} ${action.url}`;
  return `func ${action.module}`;
}
