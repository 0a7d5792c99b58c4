/**
 * May a handler, or one path of it, be turned off now? From every version of an env (active or
 * retired) and its live instances grouped by where they stand (docs/owning-services.md, "Turning
 * a handler off"). A path is still needed while an active version calls it (a new instance may
 * reach it), or while a group of live instances may still reach a call of it: it is at the step,
 * its future path from there reaches one, or unwinding would run a compensation that calls it (one
 * it registered, or one a step ahead registers). Instances past every such call do not hold it
 * back, but the answer names them: only a rewind by an operator would call it again.
 *
 * Decided from the group's place alone (state, current step, registered compensations), like the
 * compatibility report, so the work grows with the groups and not with the instances.
 */
import type { HandlerPathGroup, HandlerReach, HandlerUsage } from '../../contracts/api/handlers.ts';
import { type HandlerCall, handlerCalls } from '../../contracts/handler-calls.ts';
import type { LogicVersion } from '../../contracts/logic-version.ts';
import { reachable } from './compatibility.ts';

/** Live instances of one version at the same place: what the store groups them by, counted. */
export interface LiveGroup {
  state: 'pending' | 'processing' | 'waiting' | 'compensating';
  currentStep: string | null;
  /** Steps whose compensation is registered and not yet run to success, sorted. */
  compensations: string[];
  /** Compensating for a repair (`ctx.rewinding`): the step it re-runs from once unwound. */
  rewindTo: string | null;
  count: number;
}

export interface VersionInUse {
  doc: LogicVersion;
  active: boolean;
  /** Instances that have not ended, by state. */
  live: Record<string, number>;
  /** The same instances by place; fewer in all than `live` when the store cut the listing at its limit. */
  groups: readonly LiveGroup[];
  /** Whether the caller may see this version's name. */
  readable: boolean;
}

interface PathCaller {
  v: VersionInUse;
  calls: HandlerCall[];
  calledFrom: string[];
  groups: HandlerPathGroup[];
}

const RANK: Record<HandlerReach, number> = { at: 0, ahead: 1, compensation: 2, ungrouped: 3, passed: 4 };
/** Groups a reason names before it says how many more there are. */
const NAMED_GROUPS = 5;

const where = (part: string) => (part === 'step' ? '' : part === 'compensate' ? ' (compensate)' : ` (import ${part.slice(7)})`);
const sum = (live: Record<string, number>) => Object.values(live).reduce((a, b) => a + b, 0);
const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
const nameOf = (v: VersionInUse) => (v.readable ? `${v.doc.logicId}@${v.doc.version}` : 'a version you may not read');
const fromOf = (call: HandlerCall) => `${call.step}${where(call.part)}`;

export function handlerUsage(versions: readonly VersionInUse[]): { items: HandlerUsage[]; unreadable: number } {
  // handler → path → version key → its calls of that path
  const byHandler = new Map<string, Map<string, { methods: Set<string>; callers: Map<string, { v: VersionInUse; calls: HandlerCall[] }> }>>();
  for (const v of versions) {
    for (const call of handlerCalls(v.doc)) {
      const paths = byHandler.get(call.handler) ?? new Map();
      byHandler.set(call.handler, paths);
      const path = paths.get(call.path) ?? { methods: new Set<string>(), callers: new Map() };
      paths.set(call.path, path);
      path.methods.add(call.method);
      const key = `${v.doc.logicId}@${v.doc.version}`;
      const entry = path.callers.get(key) ?? { v, calls: [] };
      path.callers.set(key, entry);
      entry.calls.push(call);
    }
  }
  const unreadableKeys = new Set<string>();
  const items: HandlerUsage[] = [];
  for (const [handler, paths] of [...byHandler].sort(([a], [b]) => a.localeCompare(b))) {
    const pathItems = [...paths]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([path, p]) => {
        const callers: PathCaller[] = [...p.callers.values()].map(({ v, calls }) => ({
          v,
          calls,
          calledFrom: [...new Set(calls.map(fromOf))],
          groups: groupsFor(v, calls),
        }));
        for (const c of callers) if (!c.v.readable) unreadableKeys.add(`${c.v.doc.logicId}@${c.v.doc.version}`);
        return {
          path,
          methods: [...p.methods].sort(),
          versions: callers
            .filter((c) => c.v.readable)
            .map((c) => ({ logicId: c.v.doc.logicId, version: c.v.doc.version, active: c.v.active, calledFrom: c.calledFrom, live: c.v.live, groups: c.groups })),
          ...pathVerdict(callers),
        };
      });
    items.push({ handler, paths: pathItems, ...handlerVerdict(pathItems) });
  }
  return { items, unreadable: unreadableKeys.size };
}

/** Each live group of `v` with how it may reach one of `calls` (the version's calls of one path), nearest first. */
function groupsFor(v: VersionInUse, calls: readonly HandlerCall[]): HandlerPathGroup[] {
  const out: HandlerPathGroup[] = v.groups.map((g) => ({ state: g.state, currentStep: g.currentStep, count: g.count, ...reachOf(v.doc, g, calls) }));
  const ungrouped = sum(v.live) - v.groups.reduce((n, g) => n + g.count, 0);
  if (ungrouped > 0) out.push({ state: null, currentStep: null, count: ungrouped, reach: 'ungrouped', via: null });
  return out.sort((a, b) => RANK[a.reach] - RANK[b.reach] || b.count - a.count);
}

/**
 * The nearest way a group reaches one of the calls. Forward (not compensating), it is at its
 * current step (a live instance not yet begun is at the start) and goes on along the core's
 * `reachable`; a step's compensation is run by unwinding, so it counts when it is registered, or
 * when the step is still ahead and may register it. A compensating group goes forward no more,
 * unless it unwinds for a repair: then from the step the repair rewinds to.
 */
function reachOf(doc: LogicVersion, g: LiveGroup, calls: readonly HandlerCall[]): Pick<HandlerPathGroup, 'reach' | 'via'> {
  const forward = g.state !== 'compensating';
  const at = g.currentStep ?? doc.start;
  // a repair's unwinding goes forward again from the step it rewinds to
  const from = forward ? at : g.rewindTo;
  const ahead = new Set(from === null ? [] : reachable(doc, from));
  let best: Pick<HandlerPathGroup, 'reach' | 'via'> = { reach: 'passed', via: null };
  const consider = (reach: HandlerReach, call: HandlerCall) => {
    if (RANK[reach] < RANK[best.reach]) best = { reach, via: fromOf(call) };
  };
  for (const call of calls) {
    if (call.part === 'compensate') {
      if (g.compensations.includes(call.step) || ahead.has(call.step)) consider('compensation', call);
    } else if (forward && call.step === at) consider('at', call);
    else if (ahead.has(call.step)) consider('ahead', call);
  }
  return best;
}

function describe(g: HandlerPathGroup): string {
  const n = `${g.count} ${g.state}`;
  switch (g.reach) {
    case 'at':
      return `${n} at \`${g.currentStep}\`, which calls it`;
    case 'ahead':
      return `${n} at \`${g.currentStep}\`, whose path reaches \`${g.via}\``;
    case 'compensation':
      return `${n} at \`${g.currentStep}\`, which would call it unwinding through \`${g.via}\``;
    case 'ungrouped':
      return `${g.count} not looked at (past the report's group limit)`;
    case 'passed':
      return `${n} at \`${g.currentStep}\`, past every call of it`;
  }
}

/** The verdict over the versions that call one path. */
function pathVerdict(callers: readonly PathCaller[]): { mayTurnOff: boolean; reason: string } {
  const active = callers.filter((c) => c.v.active).map((c) => c.v);
  const calling = callers.flatMap((c) => c.groups.filter((g) => g.reach !== 'passed').map((g) => ({ c, g })));
  const passed = callers.flatMap((c) => c.groups.filter((g) => g.reach === 'passed').map((g) => ({ c, g })));
  const parts: string[] = [];
  if (active.length > 0) {
    parts.push(`${active.map(nameOf).join(', ')} ${active.length === 1 ? 'is' : 'are'} active, so a new instance may call it; retire ${active.length === 1 ? 'it' : 'them'} first`);
  }
  if (calling.length > 0) {
    const n = calling.reduce((a, x) => a + x.g.count, 0);
    const names = [...new Set(calling.map((x) => nameOf(x.c.v)))];
    // a version the caller may not read is counted but its steps are not named
    const shown = calling.filter((x) => x.c.v.readable).slice(0, NAMED_GROUPS).map((x) => describe(x.g));
    const more = calling.length - shown.length;
    const detail = [...shown, ...(more > 0 ? [`${plural(more, 'more group')}`] : [])].join('; ');
    parts.push(`${plural(n, 'live instance')} of ${names.join(', ')} may still call it: ${detail}`);
  }
  const passedN = passed.reduce((a, x) => a + x.g.count, 0);
  const passedNote = passedN > 0 ? `${plural(passedN, 'live instance')} ${passedN === 1 ? 'has' : 'have'} passed every call of it; only a repair or replay back to such a step would call it again` : '';
  if (parts.length > 0) return { mayTurnOff: false, reason: `no: ${parts.join('; and ')}${passedNote ? ` (${passedNote})` : ''}` };
  const all = callers.map((c) => nameOf(c.v)).join(', ');
  if (passedN > 0) return { mayTurnOff: true, reason: `yes: every version that calls it (${all}) is retired, and ${passedNote}` };
  return { mayTurnOff: true, reason: `yes: every version that calls it (${all}) is retired and none of their instances is live` };
}

/** A handler may be turned off when each of its paths may; otherwise its answer names the paths still needed. */
function handlerVerdict(paths: readonly { path: string; mayTurnOff: boolean; reason: string }[]): { mayTurnOff: boolean; reason: string } {
  const needed = paths.filter((p) => !p.mayTurnOff);
  if (needed.length === 0) return { mayTurnOff: true, reason: `yes: no version active or live instance needs any of its ${plural(paths.length, 'path')}` };
  // each path's own reason says why; the handler's names the paths, so it stays one line
  const are = needed.length === 1 ? 'is' : 'are';
  return { mayTurnOff: false, reason: `no: ${needed.length} of its ${plural(paths.length, 'path')} ${are} still needed: ${needed.map((p) => p.path).join(', ')}` };
}
