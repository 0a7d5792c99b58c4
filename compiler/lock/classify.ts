import { compareSchemas } from './schema-diff.ts';
import type { LockShape, StepRoutes } from './shape.ts';

/** One reason a definition differs from its locked version. */
export interface ChangeReason {
  readonly breaking: boolean;
  readonly text: string;
}

export interface Classification {
  /** `breaking` when any reason is; running instances could not continue on the new definition. */
  readonly kind: 'safe' | 'breaking';
  readonly reasons: readonly ChangeReason[];
}

type Steps = LockShape['steps'];
const SINGLE_ROUTES = ['next', 'onError', 'onTimeout', 'otherwise'] as const;

/**
 * Classifies the change from a locked shape to a new one (docs/sdk.md, versions): adding optional steps and
 * terminal paths is safe; removing, renaming or reordering steps, narrowing the input schema, and
 * changing an existing step's configuration or routes are breaking.
 */
export function classifyChange(before: LockShape, after: LockShape): Classification {
  const reasons: ChangeReason[] = [];
  const safe = (text: string) => reasons.push({ breaking: false, text });
  const breaking = (text: string) => reasons.push({ breaking: true, text });

  const renamed = matchRenames(before.steps, after.steps);
  const mapped = (name: string) => renamed.get(name) ?? name;
  const oldNames = new Set(Object.keys(before.steps).map(mapped));
  const isNew = (name: string) => !oldNames.has(name);
  /** The existing steps reachable from `target` through new steps only. */
  const oldTargets = (target: string): Set<string> => {
    const hit = new Set<string>();
    const queue = [target];
    const seen = new Set<string>();
    while (queue.length > 0) {
      const n = queue.shift()!;
      if (seen.has(n)) continue;
      seen.add(n);
      if (!isNew(n)) hit.add(n);
      else queue.push(...targetsOf(after.steps[n]?.routes ?? {}));
    }
    return hit;
  };
  const newStepsOn = (target: string) => reach(after.steps, target, isNew).filter(isNew);

  for (const [from, to] of renamed) breaking(`step "${from}" renamed to "${to}"`);
  for (const name of Object.keys(before.steps).sort()) {
    if (!renamed.has(name) && after.steps[name] === undefined) breaking(`step "${name}" removed`);
  }
  const checkRoute = (where: string, oldTarget: string | undefined, newTarget: string | undefined) => {
    if (oldTarget === undefined && newTarget === undefined) return;
    if (newTarget === undefined) return breaking(`${where} no longer routes to "${oldTarget}"`);
    const hits = oldTargets(newTarget);
    const added = newStepsOn(newTarget);
    if (oldTarget === undefined) {
      if (hits.size === 0) return safe(`terminal path added at ${where}: ${added.join(', ')}`);
      return breaking(`${where} now routes into existing step "${[...hits].join('", "')}"`);
    }
    const want = mapped(oldTarget);
    if (hits.size === 1 && hits.has(want)) {
      if (added.length > 0) safe(`optional step ${quoteList(added)} added at ${where}, before "${want}"`);
      return;
    }
    breaking(`${where} routed to "${want}" and now leads to ${hits.size === 0 ? 'a new ending' : `"${[...hits].join('", "')}"`}`);
  };

  checkRoute('start', before.start, after.start);
  for (const [name, old] of Object.entries(before.steps)) {
    const now = after.steps[mapped(name)];
    if (now === undefined) continue;
    const label = `step "${mapped(name)}"`;
    if (now.kind !== old.kind) breaking(`${label} changed kind from ${old.kind} to ${now.kind}`);
    else if (now.config !== old.config) breaking(`${label} changed its configuration (input, target, retry, schema…)`);
    for (const f of SINGLE_ROUTES) checkRoute(`${label} ${f}`, old.routes[f], now.routes[f]);
    checkBranches(label, old.routes, now.routes, checkRoute, breaking);
  }
  detectReorder(before, after, mapped, breaking);

  for (const c of compareSchemas(before.input, after.input)) (c.narrowed ? breaking : safe)(`input schema ${c.narrowed ? 'narrowed' : 'widened'}: ${c.text}`);
  const [ta, tb] = [before.top, after.top];
  if (ta.domain !== tb.domain) breaking(`domain changed from "${ta.domain}" to "${tb.domain}"`);
  if (ta.output !== tb.output) breaking('the workflow output mapping changed');
  if (ta.modules !== tb.modules) breaking('modules changed');
  if (ta.description !== tb.description) safe('description changed');
  for (const t of tb.triggers) if (!ta.triggers.includes(t)) safe(`trigger added or changed: ${t.split(' ')[0]}`);
  for (const t of ta.triggers) if (!tb.triggers.includes(t)) breaking(`trigger removed or changed: ${t.split(' ')[0]}`);
  // a schedule starts new instances only: running ones never see it
  const [sa, sb] = [ta.schedules ?? [], tb.schedules ?? []];
  for (const s of sb) if (!sa.includes(s)) safe(`schedule added or changed: ${s.split(' ')[0] || '(unnamed)'}`);
  for (const s of sa) if (!sb.includes(s)) safe(`schedule removed or changed: ${s.split(' ')[0] || '(unnamed)'}`);

  if (reasons.length === 0) breaking('the definition changed in a way the gate cannot classify');
  return { kind: reasons.some((r) => r.breaking) ? 'breaking' : 'safe', reasons };
}

function checkBranches(
  label: string,
  before: StepRoutes,
  after: StepRoutes,
  checkRoute: (where: string, a: string | undefined, b: string | undefined) => void,
  breaking: (text: string) => void,
): void {
  const [ba, bb] = [before.branches ?? [], after.branches ?? []];
  const positions = ba.map((b) => bb.findIndex((x) => x.when === b.when));
  for (const [i, b] of ba.entries()) checkRoute(`${label} branch when ${b.when}`, b.next, bb[positions[i]!]?.next);
  if (positions.some((p, i) => i > 0 && p !== -1 && p < positions[i - 1]!)) breaking(`${label} branches were reordered`);
  for (const b of bb) if (!ba.some((x) => x.when === b.when)) checkRoute(`${label} new branch when ${b.when}`, undefined, b.next);
}

/** An old step missing now, and exactly one new step of the same kind and configuration: a rename. */
function matchRenames(before: Steps, after: Steps): Map<string, string> {
  const renames = new Map<string, string>();
  const added = Object.keys(after).filter((n) => before[n] === undefined);
  for (const name of Object.keys(before).sort()) {
    if (after[name] !== undefined) continue;
    const old = before[name]!;
    const candidates = added.filter((n) => after[n]!.kind === old.kind && after[n]!.config === old.config && ![...renames.values()].includes(n));
    if (candidates.length === 1) renames.set(name, candidates[0]!);
  }
  return renames;
}

function targetsOf(r: StepRoutes): string[] {
  return [r.next, r.onError, r.onTimeout, ...(r.branches ?? []).map((b) => b.next), r.otherwise].filter((t): t is string => t !== undefined);
}

/** Steps reachable from `from`, walking on only while `through` holds. */
function reach(steps: Steps, from: string, through: (name: string) => boolean): string[] {
  const seen: string[] = [];
  const queue = [from];
  while (queue.length > 0) {
    const n = queue.shift()!;
    if (seen.includes(n)) continue;
    seen.push(n);
    if (through(n)) queue.push(...targetsOf(steps[n]?.routes ?? {}));
  }
  return seen;
}

/** Two existing steps whose order flipped: A ran before B, now B runs before A. */
function detectReorder(before: LockShape, after: LockShape, mapped: (n: string) => string, breaking: (t: string) => void): void {
  const common = Object.keys(before.steps).filter((n) => after.steps[mapped(n)] !== undefined).sort();
  const precedes = (steps: Steps, a: string, b: string) => reach(steps, a, () => true).slice(1).includes(b);
  for (const a of common) {
    for (const b of common) {
      if (a >= b) continue;
      const [oldAB, oldBA] = [precedes(before.steps, a, b), precedes(before.steps, b, a)];
      const [newAB, newBA] = [precedes(after.steps, mapped(a), mapped(b)), precedes(after.steps, mapped(b), mapped(a))];
      if (oldAB && !oldBA && newBA && !newAB) breaking(`steps reordered: "${mapped(b)}" now runs before "${mapped(a)}"`);
      if (oldBA && !oldAB && newAB && !newBA) breaking(`steps reordered: "${mapped(a)}" now runs before "${mapped(b)}"`);
    }
  }
}

function quoteList(names: string[]): string {
  return names.map((n) => `"${n}"`).join(', ');
}
