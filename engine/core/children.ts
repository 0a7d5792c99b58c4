import { createHash } from 'node:crypto';
import { TERMINAL_STATES, type WorkflowState } from '../../contracts/index.ts';
import type { LogicVersion } from '../../contracts/index.ts';
import { createInstance, type Instance, type JsonValue } from './instance.ts';
import type { ChildrenState } from './wake.ts';

/**
 * The rules of fan-out and fan-in that the store (and the runtime around it) and the in-process
 * runner both follow, each defined once here: a child's id, how its siblings are counted for
 * fan-in, the order a parent's cancel reaches them in, and the cancel each one takes.
 */

/**
 * The id of child `index` of the spawn made by attempt `seq` of `parentId`: derived from its place,
 * so a spawn's children have the same ids wherever it runs (the engine, the in-process runner, a
 * replay). A UUID in form (version 4, RFC 4122 variant) from a sha256 of the place.
 */
export function childId(parentId: string, seq: number, index: number): string {
  const h = createHash('sha256').update(`${parentId}:${seq}:${index}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-8${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/** Child `index` of the spawn made by attempt `seq` of `parent`, as it is created: pending, nothing run. */
export function childInstance(parent: Instance, logic: LogicVersion, seq: number, index: number, input: JsonValue): Instance {
  return {
    ...createInstance(logic, { id: childId(parent.id, seq, index), env: parent.env, input, correlationId: parent.correlationId }),
    parentId: parent.id,
    parentSeq: seq,
    branchIndex: index,
  };
}

/** How many children of one spawn are in each state: what the fan-in counts from. */
export type ChildStateCounts = Partial<Record<string, number>>;

/**
 * The fan-in's counts from the children's states: a child is open until it ends, and failed when
 * it ended any way but `completed`.
 */
export function countChildren(counts: ChildStateCounts): Omit<ChildrenState, 'results'> {
  let total = 0;
  let open = 0;
  let failed = 0;
  for (const [state, n = 0] of Object.entries(counts)) {
    total += n;
    if (!TERMINAL_STATES.has(state as WorkflowState)) open += n;
    else if (state !== 'completed') failed += n;
  }
  return { total, open, failed };
}

/** The fan-in state of a spawn whose children are all at hand, in item order. */
export function childrenStateOf(children: readonly { state: string; output: JsonValue; error: JsonValue }[]): ChildrenState {
  const counts: ChildStateCounts = {};
  for (const c of children) counts[c.state] = (counts[c.state] ?? 0) + 1;
  const summary = countChildren(counts);
  return { ...summary, results: summary.open > 0 ? null : children.map((c) => ({ state: c.state, output: c.output, error: c.error })) };
}

/** What a descendant's `error` says when it ends because its parent stopped waiting for it. */
export const CHILD_CANCEL_REASON = 'the parent workflow stopped waiting for it';

/** The cancel each open child takes when its parent cancels its children; it journals it as its own input. */
export function childCancelEvent(compensate: boolean) {
  return { type: 'verb', verb: 'cancel', args: { reason: CHILD_CANCEL_REASON, compensate } } as const;
}

/** The order a parent's cancel reaches its open children in: spawn by spawn, item by item. */
export function byCancelOrder(a: { parentSeq: number | null; branchIndex: number | null }, b: { parentSeq: number | null; branchIndex: number | null }): number {
  return (a.parentSeq ?? 0) - (b.parentSeq ?? 0) || (a.branchIndex ?? 0) - (b.branchIndex ?? 0);
}
