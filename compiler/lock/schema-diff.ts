import { canonicalJson } from '../../contracts/canonical-json.ts';

/** One difference between two input schemas: `narrowed` rejects inputs the old one accepted. */
export interface SchemaChange {
  readonly narrowed: boolean;
  readonly text: string;
}

type S = Record<string, unknown>;
const same = (a: unknown, b: unknown) => canonicalJson(a ?? null) === canonicalJson(b ?? null);
const asSchema = (v: unknown): S => (typeof v === 'object' && v !== null ? (v as S) : {});
const types = (s: S): string[] | null => (s['type'] === undefined ? null : ([] as string[]).concat(s['type'] as string));

/** Lower bounds: raising one narrows. Upper bounds: lowering one narrows. */
const LOWER = ['minimum', 'exclusiveMinimum', 'minLength', 'minItems', 'minProperties'];
const UPPER = ['maximum', 'exclusiveMaximum', 'maxLength', 'maxItems', 'maxProperties'];
const HANDLED = new Set([...LOWER, ...UPPER, 'type', 'properties', 'required', 'additionalProperties', 'items', 'enum', '$schema', 'description', 'title']);

/**
 * Compares two JSON Schemas (the subset zod emits) and lists what changed, each change marked as
 * narrowing (breaking) or widening (safe). Anything it cannot reason about counts as narrowing.
 */
export function compareSchemas(before: unknown, after: unknown, at = 'input'): SchemaChange[] {
  if (same(before, after)) return [];
  const [a, b] = [asSchema(before), asSchema(after)];
  const out: SchemaChange[] = [];
  const narrow = (text: string) => out.push({ narrowed: true, text: `${at}: ${text}` });
  const widen = (text: string) => out.push({ narrowed: false, text: `${at}: ${text}` });

  const [ta, tb] = [types(a), types(b)];
  if (!same(ta, tb)) {
    if (tb === null || ta?.every((t) => tb.includes(t) || (t === 'integer' && tb.includes('number')))) widen(`type widened to ${tb ?? 'any'}`);
    else narrow(`type changed from ${ta ?? 'any'} to ${tb}`);
  }
  for (const k of LOWER) bound(k, a[k], b[k], (x, y) => y > x);
  for (const k of UPPER) bound(k, a[k], b[k], (x, y) => y < x);
  function bound(k: string, x: unknown, y: unknown, narrower: (x: number, y: number) => boolean) {
    if (same(x, y)) return;
    if (y === undefined) widen(`${k} removed`);
    else if (x === undefined || narrower(x as number, y as number)) narrow(`${k} is now ${y}${x === undefined ? '' : ` (was ${x})`}`);
    else widen(`${k} relaxed to ${y}`);
  }

  const [pa, pb] = [asSchema(a['properties']), asSchema(b['properties'])];
  const [ra, rb] = [new Set((a['required'] as string[]) ?? []), new Set((b['required'] as string[]) ?? [])];
  for (const p of Object.keys(pb).filter((p) => !(p in pa)).sort()) {
    if (rb.has(p)) narrow(`required field "${p}" added`);
    else widen(`optional field "${p}" added`);
  }
  for (const p of Object.keys(pa).sort()) {
    if (!(p in pb)) {
      if (b['additionalProperties'] === false) narrow(`field "${p}" removed`);
      else widen(`field "${p}" no longer declared`);
      continue;
    }
    if (rb.has(p) && !ra.has(p)) narrow(`field "${p}" is now required`);
    if (ra.has(p) && !rb.has(p)) widen(`field "${p}" is now optional`);
    out.push(...compareSchemas(pa[p], pb[p], `${at}.${p}`));
  }
  if (!same(a['additionalProperties'], b['additionalProperties'])) {
    if (b['additionalProperties'] === false || typeof b['additionalProperties'] === 'object') narrow('additional properties restricted');
    else widen('additional properties allowed');
  }
  if (a['items'] !== undefined || b['items'] !== undefined) out.push(...compareSchemas(a['items'], b['items'], `${at}[]`));
  if (!same(a['enum'], b['enum'])) {
    const [ea, eb] = [(a['enum'] as unknown[]) ?? null, (b['enum'] as unknown[]) ?? null];
    if (eb === null) widen('enum removed');
    else if (ea?.every((v) => eb.some((w) => same(v, w)))) widen(`enum widened to ${JSON.stringify(eb)}`);
    else narrow(`enum now ${JSON.stringify(eb)}`);
  }
  for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
    if (HANDLED.has(k) || same(a[k], b[k])) continue;
    if (b[k] === undefined) widen(`${k} removed`);
    else narrow(`${k} changed (the gate cannot prove old inputs still pass)`);
  }
  return out;
}
