import type { FlowErrorBody, StepOfKind } from '../../contracts/index.ts';
import { durationMs } from './durations.ts';
import { evaluate } from './expressions.ts';
import type { Command, JsonValue } from './instance.ts';
import type { Draft } from './transition.ts';
import { TimeOutOfRange } from './errors.ts';
import { instantProblem, waitProblem } from './storable.ts';

/**
 * Parking: the instance writes a `parked` attempt and goes to `waiting`, costing nothing in
 * memory. What wakes it is a row too: a timer (delay, deadline), a resume (decision) or a
 * callback (async proxy step); each names the parked attempt by its `seq`, so a late or
 * duplicate wake-up for an attempt that is already over changes nothing.
 */
/**
 * When a timer falls due, for a transition committed at `committedAtMs`: at its `at`, else `delayMs`
 * after the commit. The store computes the same on the database clock (write_effects(),
 * engine/store/schema.sql); the in-process runner on its virtual one. A timer outlives its
 * transition only while the instance has not ended: an ending drops every timer it had.
 */
export function timerDueMs(timer: Extract<Command, { type: 'timer' }>, committedAtMs: number): number {
  return timer.at !== null ? Date.parse(timer.at) : committedAtMs + (timer.delayMs ?? 0);
}

function parkAttempt(d: Draft, name: string, input: JsonValue): number {
  d.instance.state = 'waiting';
  return d.startAttempt(name, input, 'parked').seq;
}

export async function enterDecision(d: Draft, name: string, step: StepOfKind<'decision'>, input: JsonValue): Promise<void> {
  const deadlineMs = step.deadline === undefined ? null : waitOf('deadline', step.deadline);
  const seq = parkAttempt(d, name, input);
  // no deadline, no timer: a decision waits as long as it takes unless the definition says otherwise
  if (deadlineMs !== null) d.commands.push({ type: 'timer', purpose: 'deadline', delayMs: deadlineMs, at: null, seq });
}

/**
 * A waitFor step parks on its message. A message buffered before the step was reached is handed
 * over by the shell right after this commit (the core sees it as a `message` event, like one that
 * arrives later), so what the core decides depends only on what it is given. A timeout is a
 * `deadline` timer, as a decision's.
 */
export function enterWaitFor(d: Draft, name: string, step: StepOfKind<'waitFor'>, input: JsonValue): void {
  const timeoutMs = step.timeout === undefined ? null : waitOf('timeout', step.timeout);
  const seq = parkAttempt(d, name, input);
  if (timeoutMs !== null) d.commands.push({ type: 'timer', purpose: 'deadline', delayMs: timeoutMs, at: null, seq });
}

/** A duration's milliseconds, thrown as TimeOutOfRange (before the draft changes) when it cannot be scheduled. */
function waitOf(field: string, iso: string): number {
  const ms = durationMs(iso);
  const problem = waitProblem(ms);
  if (problem !== null) throw new TimeOutOfRange(field, `${iso}: ${problem}`);
  return ms;
}

/**
 * The most children one `children` step may spawn. The spawn is one commit, and the parent's
 * fan-in reads every child's result, so an unbounded list (100,000 items from a bad mapping) would
 * be one giant transaction; past the limit the step fails FLOW_TOO_MANY_CHILDREN and spawns none.
 * A constant, not a setting: replaying a trace must reach the same decision on any engine.
 */
export const MAX_CHILDREN_PER_STEP = 10_000;

/**
 * Fan-out: one child per item, spawned in the same commit that parks this step. No items means
 * nothing to wait for: the output is an empty array at once (returns false: did not park). A bad
 * `items` returns the step error instead.
 */
export async function enterChildren(d: Draft, name: string, step: StepOfKind<'children'>, input: JsonValue): Promise<FlowErrorBody | boolean> {
  const items = await evaluate('items', step.items, d.instance);
  if (!Array.isArray(items)) return { code: 'FLOW_BAD_ITEMS', message: `items evaluated to ${JSON.stringify(items)?.slice(0, 200)}, not an array` };
  if (items.length > MAX_CHILDREN_PER_STEP) {
    return { code: 'FLOW_TOO_MANY_CHILDREN', message: `items has ${items.length} entries; a children step spawns at most ${MAX_CHILDREN_PER_STEP}` };
  }
  if (items.length === 0) return false;
  const inputs: JsonValue[] = [];
  for (const [index, item] of items.entries()) inputs.push(await evaluate('itemInput', step.itemInput, d.instance, { item, index }));
  const seq = parkAttempt(d, name, input);
  d.commands.push({ type: 'spawn', logicId: step.logicId, version: step.version ?? null, inputs, seq });
  return true;
}

/** A delay parks until its timer; `until` must evaluate to an ISO timestamp. */
export async function enterDelay(d: Draft, name: string, step: StepOfKind<'delay'>, input: JsonValue): Promise<string | null> {
  let at: string | null = null;
  if (step.until !== undefined) {
    const value = await evaluate('until', step.until, d.instance);
    if (typeof value !== 'string' || Number.isNaN(Date.parse(value))) {
      return `until evaluated to ${JSON.stringify(value)}, not an ISO timestamp`;
    }
    const problem = instantProblem(Date.parse(value));
    if (problem !== null) throw new TimeOutOfRange('until', `${JSON.stringify(value).slice(0, 100)}: ${problem}`);
    at = new Date(value).toISOString();
  }
  const delayMs = step.duration === undefined ? null : waitOf('duration', step.duration);
  const seq = parkAttempt(d, name, input);
  d.commands.push({ type: 'timer', purpose: 'delay', delayMs, at, seq });
  return null;
}
