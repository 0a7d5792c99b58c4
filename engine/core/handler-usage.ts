/**
 * May a handler, or one path of it, be turned off now? From every version of an env (active or
 * retired) and its instances that have not ended: a path is still needed while an active version
 * calls it (a new instance may reach it) or a live instance of any version that calls it exists.
 * Conservative on purpose: a live instance counts whether or not its own path still reaches the
 * call, since a retry, repair or replay can take it back there.
 */
import type { HandlerUsage } from '../../contracts/api/handlers.ts';
import { handlerCalls } from '../../contracts/handler-calls.ts';
import type { LogicVersion } from '../../contracts/logic-version.ts';

export interface VersionInUse {
  doc: LogicVersion;
  active: boolean;
  /** Instances that have not ended, by state. */
  live: Record<string, number>;
  /** Whether the caller may see this version's name. */
  readable: boolean;
}

const where = (part: string) => (part === 'step' ? '' : part === 'compensate' ? ' (compensate)' : ` (import ${part.slice(7)})`);
const sum = (live: Record<string, number>) => Object.values(live).reduce((a, b) => a + b, 0);

export function handlerUsage(versions: readonly VersionInUse[]): { items: HandlerUsage[]; unreadable: number } {
  // handler → path → version key → what the report needs
  const byHandler = new Map<string, Map<string, { methods: Set<string>; versions: Map<string, { v: VersionInUse; calledFrom: string[] }> }>>();
  for (const v of versions) {
    for (const call of handlerCalls(v.doc)) {
      const paths = byHandler.get(call.handler) ?? new Map();
      byHandler.set(call.handler, paths);
      const path = paths.get(call.path) ?? { methods: new Set<string>(), versions: new Map() };
      paths.set(call.path, path);
      path.methods.add(call.method);
      const key = `${v.doc.logicId}@${v.doc.version}`;
      const entry = path.versions.get(key) ?? { v, calledFrom: [] };
      path.versions.set(key, entry);
      const from = `${call.step}${where(call.part)}`;
      if (!entry.calledFrom.includes(from)) entry.calledFrom.push(from);
    }
  }
  const unreadableKeys = new Set<string>();
  const items: HandlerUsage[] = [];
  for (const [handler, paths] of [...byHandler].sort(([a], [b]) => a.localeCompare(b))) {
    const pathItems = [...paths]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([path, p]) => {
        const all = [...p.versions.values()];
        for (const e of all) if (!e.v.readable) unreadableKeys.add(`${e.v.doc.logicId}@${e.v.doc.version}`);
        return { path, methods: [...p.methods].sort(), all, ...verdict(all.map((e) => e.v)) };
      });
    items.push({
      handler,
      paths: pathItems.map(({ path, methods, all, mayTurnOff, reason }) => ({
        path,
        methods,
        versions: all
          .filter((e) => e.v.readable)
          .map((e) => ({ logicId: e.v.doc.logicId, version: e.v.doc.version, active: e.v.active, calledFrom: e.calledFrom, live: e.v.live })),
        mayTurnOff,
        reason,
      })),
      ...verdict([...new Map(pathItems.flatMap((p) => p.all.map((e) => [`${e.v.doc.logicId}@${e.v.doc.version}`, e.v] as const))).values()]),
    });
  }
  return { items, unreadable: unreadableKeys.size };
}

/** The verdict over the versions that call a path (or any path of a handler). */
function verdict(callers: readonly VersionInUse[]): { mayTurnOff: boolean; reason: string } {
  const name = (v: VersionInUse) => (v.readable ? `${v.doc.logicId}@${v.doc.version}` : 'a version you may not read');
  const active = callers.filter((v) => v.active);
  if (active.length > 0) return { mayTurnOff: false, reason: `no: ${active.map(name).join(', ')} ${active.length === 1 ? 'is' : 'are'} active, so a new instance may call it; retire ${active.length === 1 ? 'it' : 'them'} and let the live instances end first` };
  const live = callers.filter((v) => sum(v.live) > 0);
  if (live.length > 0) {
    const n = live.reduce((a, v) => a + sum(v.live), 0);
    return { mayTurnOff: false, reason: `no: ${n} instance${n === 1 ? '' : 's'} of ${live.map(name).join(', ')} ${n === 1 ? 'has' : 'have'} not ended and may still call it (a retry, repair or compensation can reach any step)` };
  }
  return { mayTurnOff: true, reason: `yes: every version that calls it (${callers.map(name).join(', ')}) is retired and none of their instances is live` };
}
