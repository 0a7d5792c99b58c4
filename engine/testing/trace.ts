import { canonicalJson, FlowError, type LogicVersion } from '../../contracts/index.ts';
import type { Instance } from '../core/instance.ts';
import { apply, type Decision, decisionOf, type FinalRecord, type Trace, type TraceEvent } from '../core/journal.ts';
import type { Transition } from '../core/transition.ts';
import { isTombstone } from '../../contracts/erasure.ts';
import { InstanceErased } from '../errors.ts';

export { apply, type Decision, decisionOf, type FinalRecord, type Trace, type TraceEntry, type TraceEvent } from '../core/journal.ts';

/** What a replayed event produced when it differs: a decision, nothing, a refusal, or another ending. */
export type Replayed = Decision | null | { refused: string; message: string } | FinalRecord;

/** Where a replay left the recorded path: the event, the attempt it concerned, and the first field that differs. */
export interface DivergenceDetails {
  /** Index of the event in `trace.entries`; `entries.length` when only the final record differs. */
  index: number;
  event: TraceEvent['type'] | 'end';
  /** The step (and its attempt) the instance was at when the event arrived. */
  step: string | null;
  attempt: number | null;
  /** The first differing field, as a path (`attempts[1].state`, `currentStep`), or `(all)`. */
  field: string;
  expected: Decision | FinalRecord | null;
  actual: Replayed;
}

export class ReplayDivergence extends FlowError {
  constructor(readonly divergence: DivergenceDetails) {
    const d = divergence;
    const where = d.step === null ? '' : ` (step ${d.step}${d.attempt === null ? '' : `, attempt ${d.attempt}`})`;
    super(
      'FLOW_REPLAY_DIVERGED',
      `replay diverged at event ${d.index} [${d.event}]${where} on ${d.field}:\n  recorded: ${canonicalJson(d.expected)}\n  replayed: ${canonicalJson(d.actual)}`,
      { details: { ...d } },
    );
  }
}

/**
 * Re-derives every decision of a recorded run from its events alone — no executor, no fake, no
 * module runtime, no clock — and throws ReplayDivergence (FLOW_REPLAY_DIVERGED) at the first
 * decision that differs, including an event the core now refuses, and at the end when the trace
 * carries the store's final record and the replay ends elsewhere. Returns the final instance.
 *
 * `logic` may be another version of the trace's workflow (same logicId): the replay then shows
 * whether the new definition decides this recorded run the same way, and where it first does not.
 * Children are not followed: replay each child's own trace with its own LogicVersion.
 *
 * A migrated instance's trace (a `migrate` entry, docs/versions.md) was decided on more than one
 * version: before its first migration on the version it began on, after each on the version it
 * moved to. Each is taken from `logic` or `opts.versions` by its hash (FLOW_REPLAY_VERSION_MISSING
 * names one that is in neither).
 */
export async function replay(logic: LogicVersion, trace: Trace, opts: { versions?: readonly LogicVersion[] } = {}): Promise<Instance> {
  if (logic.hash !== trace.logicHash && logic.logicId !== trace.initial.logicId) {
    throw new FlowError(
      'FLOW_REPLAY_WRONG_VERSION',
      `trace was recorded on ${trace.initial.logicId} (${trace.logicHash}), not ${logic.logicId}@${logic.version}`,
    );
  }
  // an erased instance's trace holds tombstones where its inputs were: there is nothing to re-derive
  if (isTombstone(trace.initial.input)) throw new InstanceErased(trace.initial.id, 'replay');
  let inst = trace.initial;
  const known = new Map([logic, ...(opts.versions ?? [])].map((v) => [v.hash, v]));
  const versions = (hash: string) => known.get(hash);
  const migrated = trace.entries.some((e) => e.event.type === 'migrate');
  if (migrated) {
    const first = versions(trace.initial.logicHash);
    if (first === undefined) {
      throw new FlowError('FLOW_REPLAY_VERSION_MISSING', `the trace began on version ${trace.initial.version} (${trace.initial.logicHash}): pass that LogicVersion among the versions`, { status: 422 });
    }
    logic = first;
  }
  for (const [index, entry] of trace.entries.entries()) {
    if (entry.from !== undefined) inst = { ...inst, state: entry.from };
    const running = inst.ctx.running;
    const at = { index, event: entry.event.type, step: running?.step ?? inst.currentStep, attempt: running?.attempt ?? null };
    let t: Transition | null;
    try {
      t = await apply(logic, inst, entry.event, false, versions);
    } catch (err) {
      if (!(err instanceof FlowError)) throw err;
      throw new ReplayDivergence({ ...at, field: '(refused)', expected: entry.decision, actual: { refused: err.code, message: err.message } });
    }
    const actual = t === null ? null : decisionOf(t);
    const field = firstDifference(entry.decision, actual);
    if (field !== null) throw new ReplayDivergence({ ...at, field, expected: entry.decision, actual });
    if (t !== null) inst = t.instance;
    if (entry.event.type === 'migrate') logic = versions(entry.event.to.hash)!;
  }
  if (trace.final !== undefined) {
    const reached: FinalRecord = {
      state: inst.state,
      currentStep: inst.currentStep,
      generation: inst.generation,
      output: inst.output,
      error: inst.error,
    };
    const field = firstDifference(normalFinal(trace.final), normalFinal(reached));
    if (field !== null) {
      const running = inst.ctx.running;
      const index = trace.entries.length;
      throw new ReplayDivergence({ index, event: 'end', step: inst.currentStep, attempt: running?.attempt ?? null, field, expected: trace.final, actual: reached });
    }
  }
  return inst;
}

/** A claimed instance is `processing` in the store; which of the two runnable states it shows is not a decision. */
function normalFinal(f: FinalRecord): FinalRecord {
  return f.state === 'processing' ? { ...f, state: 'pending' } : f;
}

/** The path of the first field where two JSON values differ (canonical JSON), or null when equal. */
export function firstDifference(a: unknown, b: unknown, path = ''): string | null {
  if (json(a) === json(b)) return null;
  const bothArrays = Array.isArray(a) && Array.isArray(b);
  const bothObjects = !bothArrays && isObject(a) && isObject(b);
  if (bothArrays) {
    const n = Math.max(a.length, b.length);
    for (let i = 0; i < n; i++) {
      const d = firstDifference(a[i], b[i], `${path}[${i}]`);
      if (d !== null) return d;
    }
  }
  if (bothObjects) {
    for (const k of [...new Set([...Object.keys(a), ...Object.keys(b)])].sort()) {
      const d = firstDifference(a[k], b[k], path === '' ? k : `${path}.${k}`);
      if (d !== null) return d;
    }
  }
  return path === '' ? '(all)' : path;
}

function json(v: unknown): string {
  return v === undefined ? '(absent)' : canonicalJson(v);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
