import { canonicalJson } from '../../contracts/canonical-json.ts';

type Schema = Record<string, unknown>;

/** Keys that describe a schema without constraining what it accepts. */
const ANNOTATIONS = new Set(['$schema', '$id', 'title', 'description', 'examples', 'default', '$comment']);

/**
 * Does every value `older` accepts also pass `newer`? The compatibility report asks it of a step
 * whose output was recorded under one version and is read under another: a recorded output
 * conforms to the schema it was checked against, so what `newer` refuses of it is a read that
 * may break. Decided structurally and conservatively: `true` only when it can be shown — `newer`
 * is absent or the same schema, or both are objects whose every property `newer` constrains is
 * one `older` constrains at least as tightly (recursively), and `newer` requires nothing `older`
 * does not. Anything else (a changed scalar, an enum, `anyOf`) counts as changed.
 */
export function outputAccepts(older: Schema | undefined, newer: Schema | undefined): boolean {
  if (newer === undefined) return true;
  // no schema under N: its outputs were never checked, so nothing shows they fit N+1's
  if (older === undefined) return false;
  return accepts(older, newer);
}

function accepts(older: Schema, newer: Schema): boolean {
  const a = constraints(older);
  const b = constraints(newer);
  if (Object.keys(b).length === 0) return true;
  if (canonicalJson(a) === canonicalJson(b)) return true;
  if (a['type'] !== 'object' || b['type'] !== 'object') return false;
  const rest = (s: Schema) => Object.keys(s).filter((k) => !['type', 'properties', 'required', 'additionalProperties'].includes(k));
  if (rest(a).length > 0 || rest(b).length > 0) return false;
  const requiredA = new Set((a['required'] as string[] | undefined) ?? []);
  if (!((b['required'] as string[] | undefined) ?? []).every((p) => requiredA.has(p))) return false;
  const propsA = (a['properties'] ?? {}) as Record<string, Schema>;
  const propsB = (b['properties'] ?? {}) as Record<string, Schema>;
  const closedA = a['additionalProperties'] === false;
  for (const [name, schemaB] of Object.entries(propsB)) {
    const schemaA = propsA[name];
    // a property `older` never allowed is never present; one it left open may hold anything
    if (schemaA === undefined ? !closedA : !accepts(schemaA, schemaB)) return false;
  }
  // `newer` limiting extra properties: only `older`'s named ones may appear, and `newer` names them all
  const extraB = b['additionalProperties'];
  if (extraB !== undefined && extraB !== true && !(closedA && Object.keys(propsA).every((p) => p in propsB))) return false;
  return true;
}

function constraints(s: Schema): Schema {
  return Object.fromEntries(Object.entries(s).filter(([k]) => !ANNOTATIONS.has(k)));
}
