/**
 * Could the live instances of version N continue on a candidate N+1 at the step they are at?
 * Decided from an instance's shape alone — where it is and which outputs and compensations it
 * holds, never their values — so one verdict holds for every instance of the same shape, and the
 * report over a million instances evaluates one per group (docs/versions.md).
 *
 * Compensations: the engine resolves a registered compensation on the version the instance is
 * pinned to, when it unwinds (`prepareNextCompensation` in flow.ts reads `d.logic.steps[step]
 * .compensate`). An instance continuing on N+1 would therefore run N+1's compensation of that
 * step, so a registered compensation must be there on N+1, and the same action.
 *
 * Renames (the migrate verb's step-rename map, `{ oldStep: newStep }`): a step of N is looked for
 * on N+1 under its new name, and everything the instances hold of it (their step, outputs and
 * compensations) is read under that name too. Without renames, every step keeps its name.
 */
import { canonicalJson } from '../../contracts/canonical-json.ts';
import type { LogicVersion, StepDef } from '../../contracts/logic-version.ts';
import { expressionsOf } from '../../contracts/expressions.ts';
import { routesOf } from '../../contracts/validate.ts';
import { outputAccepts } from './output-shapes.ts';
import { stepReads } from './step-reads.ts';

/** Where a group of live instances stands: every column the store groups them by. */
export interface InstanceShape {
  state: 'pending' | 'processing' | 'waiting' | 'compensating';
  /** The step it is at: running, parked, about to run, or (compensating) the one that failed. */
  currentStep: string | null;
  /** What its running attempt is: a step's, a compensation's, or none yet (an unstarted child). */
  running: 'step' | 'compensation' | null;
  generation: number;
  /** Steps whose output it holds (the `steps` its expressions read), sorted. */
  outputs: string[];
  /** Steps whose compensation is registered and not yet run to success, sorted. */
  compensations: string[];
  /**
   * Names of the messages delivered to it and buffered until a waitFor step takes them, sorted.
   * (Default: none; the compatibility report does not read them, the migrate verb does)
   */
  messages?: string[];
}

/** Why a group cannot continue on the candidate: each a stable code (docs/errors.md, compatibility report). */
export const CompatCode = {
  stepMissing: 'FLOW_COMPAT_STEP_MISSING',
  kindChanged: 'FLOW_COMPAT_STEP_KIND_CHANGED',
  callChanged: 'FLOW_COMPAT_CALL_CHANGED',
  outputMissing: 'FLOW_COMPAT_OUTPUT_MISSING',
  outputShape: 'FLOW_COMPAT_OUTPUT_SHAPE_CHANGED',
  compensationMissing: 'FLOW_COMPAT_COMPENSATION_MISSING',
  compensationChanged: 'FLOW_COMPAT_COMPENSATION_CHANGED',
  messageUntaken: 'FLOW_COMPAT_MESSAGE_UNTAKEN',
} as const;
export type CompatCode = (typeof CompatCode)[keyof typeof CompatCode];

export interface CompatReason {
  code: CompatCode;
  /** The step the reason is about (the one missing, changed, or whose output is read). */
  step: string;
  /** Where it is read, for output reasons: `steps.charge.input`, `output`. */
  readBy?: string;
  message: string;
}

export interface CompatVerdict {
  verdict: 'safe' | 'unsafe';
  reasons: CompatReason[];
}

/** Virtual node: the workflow ends (and its `output` expression is read). */
const END = '\u0000end';

export type StepRenames = Readonly<Record<string, string>>;

export function compatibility(from: LogicVersion, to: LogicVersion, shape: InstanceShape, renames: StepRenames = {}): CompatVerdict {
  const reasons: CompatReason[] = [];
  const candidate = `${to.logicId}@${to.version}`;
  const rn = (s: string) => renames[s] ?? s;
  const back = new Map(Object.entries(renames).map(([old, now]) => [now, old]));
  const old = (s: string) => back.get(s) ?? s;
  const forward = shape.state !== 'compensating' && shape.currentStep !== null;
  const at = shape.currentStep;
  if (forward && at !== null) {
    const now = to.steps[rn(at)];
    if (now === undefined) {
      reasons.push({ code: CompatCode.stepMissing, step: at, message: `step ${at}, where these instances are, is not in ${candidate}` });
    } else if (now.kind !== from.steps[at]?.kind) {
      reasons.push({
        code: CompatCode.kindChanged,
        step: at,
        message: `step ${at}, where these instances are, is a ${from.steps[at]?.kind ?? 'missing'} step in ${from.version} and a ${now.kind} step in ${to.version}`,
      });
    } else if (shape.running === 'step' && callOf(from, from.steps[at]!) !== callOf(to, now)) {
      // the attempt under way keeps its key (it may have reached the service already): its next
      // try must reach the same endpoint, or the key means another call there
      reasons.push({
        code: CompatCode.callChanged,
        step: at,
        message: `step ${at} has a call under way; ${candidate} sends it to ${callOf(to, now)} instead of ${callOf(from, from.steps[at]!)}, under the key it already carries`,
      });
    }
  }
  for (const step of shape.compensations) {
    const before = from.steps[step]?.compensate;
    const after = to.steps[rn(step)]?.compensate;
    if (after === undefined) {
      const why = to.steps[rn(step)] === undefined ? `step ${step} is not in ${candidate}` : `${candidate} does not compensate ${step}`;
      reasons.push({ code: CompatCode.compensationMissing, step, message: `a compensation of ${step} is registered, but ${why}: unwinding would skip it` });
    } else if (before !== undefined && canonicalJson(before) !== canonicalJson(after)) {
      reasons.push({
        code: CompatCode.compensationChanged,
        step,
        message: `the registered compensation of ${step} would run ${candidate}'s action, which differs from the one registered under version ${from.version}`,
      });
    }
  }
  // a missing current step leaves no path to follow on the candidate
  if (reasons.some((r) => r.code === CompatCode.stepMissing)) return verdictOf(reasons);
  if (forward && at !== null) reasons.push(...untakenMessages(from, to, at, rn(at), shape.messages ?? []));

  // from here on the instances are read as they would be on the candidate: under the new names
  const moved: InstanceShape = {
    ...shape,
    currentStep: at === null ? null : rn(at),
    outputs: shape.outputs.map(rn),
    compensations: shape.compensations.map(rn),
  };
  const recorded = new Set(moved.outputs);
  const renamedRead = (readBy: string) => readBy.replace(/^steps\.([^.]+)\./, (_m, name: string) => `steps.${rn(name)}.`);
  const alreadyMissing = new Set(missingReads(from, shape, new Set(shape.outputs)).map((m) => `${renamedRead(m.readBy)}|${rn(m.step)}`));
  for (const m of missingReads(to, moved, recorded)) {
    // a read N leaves missing as well is how the definition already behaves (an onError branch, say)
    if (alreadyMissing.has(`${m.readBy}|${m.step}`)) continue;
    reasons.push({
      code: CompatCode.outputMissing,
      step: m.step,
      readBy: m.readBy,
      message: `${m.readBy} reads steps.${m.step}, which these instances have no output of and may not produce before reading it on ${candidate}`,
    });
  }
  const shapes = new Set<string>();
  for (const r of futureReaders(to, moved)) {
    for (const read of r.reads) {
      if (!recorded.has(read.step) || shapes.has(read.step)) continue;
      if (outputAccepts(from.steps[old(read.step)]?.output, to.steps[read.step]?.output)) continue;
      shapes.add(read.step);
      reasons.push({
        code: CompatCode.outputShape,
        step: read.step,
        readBy: r.at,
        message: `${r.at} reads steps.${read.step}, recorded under version ${from.version}, whose output schema ${candidate} does not accept as it stands`,
      });
    }
  }
  return verdictOf(reasons);
}

/**
 * Buffered messages a waitFor step of N ahead of the instances would take, but no waitFor step of
 * the candidate ahead of where they land waits for (the step renamed and waiting for another
 * name, or gone): they would stay buffered for good. A message N would not take either is
 * stranded already, and not the candidate's doing.
 */
function untakenMessages(from: LogicVersion, to: LogicVersion, at: string, lands: string, messages: readonly string[]): CompatReason[] {
  const takers = (doc: LogicVersion, start: string, name: string) =>
    reachable(doc, start).filter((s) => {
      const step = doc.steps[s];
      return step?.kind === 'waitFor' && step.message === name;
    });
  const reasons: CompatReason[] = [];
  for (const name of messages) {
    const before = takers(from, at, name);
    if (before.length === 0 || takers(to, lands, name).length > 0) continue;
    reasons.push({
      code: CompatCode.messageUntaken,
      step: before[0]!,
      message: `a message ${name} is buffered for step ${before[0]}, but no waitFor step of ${to.logicId}@${to.version} after ${lands} waits for ${name}: it would never be taken`,
    });
  }
  return reasons;
}

/** Where a step's calls go (proxy handler and path, http method and URL, func module), or '' for a step that calls nothing. */
function callOf(doc: LogicVersion, step: StepDef): string {
  if (step.kind === 'proxy') return `proxy ${step.handler ?? doc.domain} ${step.method ?? 'POST'} ${step.path}`;
  if (step.kind === 'http') return `http ${step.method} ${step.url} ${canonicalJson(step.headers ?? {})}`;
  if (step.kind === 'func') return `func ${step.module} ${step.export ?? ''}`;
  return '';
}

function verdictOf(reasons: CompatReason[]): CompatVerdict {
  return { verdict: reasons.length === 0 ? 'safe' : 'unsafe', reasons };
}

interface Reader {
  /** The expression's path in the document: `steps.charge.input`, `output`. */
  at: string;
  /** The node where it is read: a step, or END for the workflow's output. */
  node: string;
  reads: { step: string; probe: boolean }[];
}

/**
 * Every expression the instances may still evaluate on `doc`: those of the steps reachable from
 * where they are (but the input of the step already running: it was evaluated when it was
 * prepared), the workflow's output, and the input of every registered compensation.
 */
function futureReaders(doc: LogicVersion, shape: InstanceShape): Reader[] {
  const readers: Reader[] = [];
  const add = (at: string, node: string, expr: string | undefined) => {
    if (expr !== undefined) readers.push({ at, node, reads: stepReads(expr) });
  };
  for (const step of shape.compensations) add(`steps.${step}.compensate.input`, step, doc.steps[step]?.compensate?.input);
  const at = shape.currentStep;
  if (shape.state === 'compensating' || at === null || doc.steps[at] === undefined) return readers;
  for (const name of reachable(doc, at)) {
    const skipInput = name === at && shape.running === 'step';
    for (const { field, expr } of stepExpressions(doc, name)) {
      if (!(skipInput && field === 'input')) add(`steps.${name}.${field}`, name, expr);
    }
  }
  add('output', END, doc.output);
  return readers;
}

/** Reads of an output the instances do not hold and may reach without the step producing it first. */
function missingReads(doc: LogicVersion, shape: InstanceShape, recorded: Set<string>): { step: string; readBy: string }[] {
  const out: { step: string; readBy: string }[] = [];
  for (const r of futureReaders(doc, shape)) {
    for (const read of r.reads) {
      if (read.probe || recorded.has(read.step)) continue;
      const forward = shape.state !== 'compensating' && shape.currentStep !== null && doc.steps[shape.currentStep] !== undefined;
      if (!forward || reachesWithout(doc, shape.currentStep!, r.node, read.step)) out.push({ step: read.step, readBy: r.at });
    }
  }
  return out;
}

/** The steps reachable from `start`, itself included (also the handler usage report's future path). */
export function reachable(doc: LogicVersion, start: string): string[] {
  const seen = new Set<string>();
  const queue = [start];
  while (queue.length > 0) {
    const name = queue.pop()!;
    if (seen.has(name) || doc.steps[name] === undefined) continue;
    seen.add(name);
    queue.push(...successors(doc.steps[name]!, false));
  }
  return [...seen];
}

/**
 * Whether `target` can be reached from `start` on a path where `producer` has not produced its
 * output: through `producer`, only the routes taken when it fails (onError, a decision's onTimeout).
 */
function reachesWithout(doc: LogicVersion, start: string, target: string, producer: string): boolean {
  const seen = new Set<string>();
  const queue = [start];
  while (queue.length > 0) {
    const name = queue.pop()!;
    if (name === target) return true;
    if (seen.has(name) || doc.steps[name] === undefined) continue;
    seen.add(name);
    queue.push(...successors(doc.steps[name]!, name === producer));
  }
  return false;
}

/** Where a step can go: its routes, and END where it may end the workflow (with `failedOnly`, only the failure routes). */
function successors(step: StepDef, failedOnly: boolean): string[] {
  const routes = routesOf(step).filter((r) => !failedOnly || r.field === 'onError' || r.field === 'onTimeout');
  const targets = routes.map((r) => r.target);
  const ends = step.kind !== 'choice' && step.kind !== 'fail' && (step.next === undefined || step.next === null);
  if (!failedOnly && ends) targets.push(END);
  return targets;
}

/** A step's own expressions with their field (`input`, `compensate.input`, `branches.0.when`…), from the one walk of a document's expressions. */
function stepExpressions(doc: LogicVersion, name: string): { field: string; expr: string }[] {
  const prefix = `steps.${name}.`;
  return [...expressionsOf(doc)].filter((e) => e.path.startsWith(prefix)).map((e) => ({ field: e.path.slice(prefix.length), expr: e.expr }));
}
