import type { AttributeType } from '../../contracts/index.ts';
import { AttributeInvalid } from './errors.ts';
import { evaluate } from './expressions.ts';
import type { JsonValue } from './instance.ts';
import { instantProblem } from './storable.ts';
import type { Draft } from './transition.ts';

/**
 * Search attributes (docs/search-attributes.md): typed values an instance is found by. The core
 * evaluates their mappings and types each value; the transition carries what changed and the
 * store writes it to `workflow_attributes` in the same commit. `null` unsets an attribute.
 */
export type AttributeWrite = { type: AttributeType; value: string | number } | null;

/** Longest text attribute: it is a btree key, and search attributes are identifiers, not documents. */
export const MAX_ATTRIBUTE_TEXT = 256;

/** An ISO 8601 instant with its offset: what a `time` attribute holds (and an untyped string is taken for). */
const ISO_INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/;

/** The milliseconds of an ISO 8601 instant a `time` attribute may hold, or null. */
export function instantMs(s: string): number | null {
  if (!ISO_INSTANT.test(s)) return null;
  const ms = Date.parse(s);
  return instantProblem(ms) === null ? ms : null;
}

/**
 * Types one value. Declared: the value must be of that type. Undeclared: a number is a number, a
 * string that is an ISO 8601 instant a time, any other string a string. A time is stored in UTC.
 */
export function attributeOf(name: string, declared: AttributeType | undefined, value: JsonValue): AttributeWrite {
  if (value === null) return null;
  if (typeof value === 'number' && (declared === undefined || declared === 'number')) return { type: 'number', value };
  if (typeof value === 'string' && declared !== 'number') {
    const ms = declared === 'string' ? null : instantMs(value);
    if (declared === 'time' && ms === null) throw new AttributeInvalid(name, `${JSON.stringify(value.slice(0, 40))} is not an ISO 8601 instant with an offset in the years 1 to 9999`);
    if (ms !== null) return { type: 'time', value: new Date(ms).toISOString() };
    if (value.length > MAX_ATTRIBUTE_TEXT) throw new AttributeInvalid(name, `a text value is at most ${MAX_ATTRIBUTE_TEXT} characters (got ${value.length})`);
    return { type: 'string', value };
  }
  const got = Array.isArray(value) ? 'array' : typeof value;
  throw new AttributeInvalid(name, declared === undefined ? `a ${got} is not a string, number or time` : `a ${got} is not a ${declared}`);
}

/**
 * Evaluates attribute mappings against the draft's instance (plus `extra`, e.g. a step's own
 * `output`) and records their values on the draft. Throws ExpressionFailed or AttributeInvalid
 * before recording anything, so a failure leaves the draft as it was.
 */
export async function setAttributes(d: Draft, mappings: Readonly<Record<string, string>>, extra: Record<string, JsonValue> = {}): Promise<void> {
  const writes: Record<string, AttributeWrite> = {};
  for (const [name, expr] of Object.entries(mappings)) {
    const value = await evaluate(`attributes.${name}`, expr, d.instance, extra);
    writes[name] = attributeOf(name, d.logic.attributes?.[name]?.type, value);
  }
  d.attributes = { ...d.attributes, ...writes };
}

/** The start mappings of the definition's attributes (those with a `value`). */
export function startMappings(attributes: NonNullable<Draft['logic']['attributes']>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, a] of Object.entries(attributes)) if (a.value !== undefined) out[name] = a.value;
  return out;
}
