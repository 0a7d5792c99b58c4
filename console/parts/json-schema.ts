/**
 * Checks a value against the JSON Schema subset the compiler emits from zod (type, properties,
 * required, additionalProperties, enum, const, string and number bounds, pattern, items, anyOf),
 * so the console can say what is wrong before the server refuses. The server checks again.
 */
export type Schema = Record<string, unknown>;

export function schemaProblems(schema: Schema | undefined, value: unknown, path = ''): string[] {
  if (schema === undefined || schema === null || typeof schema !== 'object') return [];
  const at = path || '(root)';
  const out: string[] = [];
  if (Array.isArray(schema['anyOf'])) {
    const ok = (schema['anyOf'] as Schema[]).some((s) => schemaProblems(s, value, path).length === 0);
    if (!ok) out.push(`${at}: matches none of the allowed shapes`);
  }
  if ('const' in schema && JSON.stringify(schema['const']) !== JSON.stringify(value)) out.push(`${at}: must be ${JSON.stringify(schema['const'])}`);
  if (Array.isArray(schema['enum']) && !schema['enum'].some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    out.push(`${at}: must be one of ${schema['enum'].map((e) => JSON.stringify(e)).join(', ')}`);
  }
  const types = schema['type'] === undefined ? null : ([] as string[]).concat(schema['type'] as string);
  if (types !== null && !types.some((t) => isType(t, value))) {
    out.push(`${at}: must be ${types.join(' or ')}`);
    return out;
  }
  if (typeof value === 'string') {
    if (typeof schema['minLength'] === 'number' && value.length < schema['minLength']) out.push(`${at}: at least ${schema['minLength']} characters`);
    if (typeof schema['maxLength'] === 'number' && value.length > schema['maxLength']) out.push(`${at}: at most ${schema['maxLength']} characters`);
    if (typeof schema['pattern'] === 'string' && !safeTest(schema['pattern'], value)) out.push(`${at}: does not match ${schema['pattern']}`);
  }
  if (typeof value === 'number') {
    if (typeof schema['minimum'] === 'number' && value < schema['minimum']) out.push(`${at}: at least ${schema['minimum']}`);
    if (typeof schema['maximum'] === 'number' && value > schema['maximum']) out.push(`${at}: at most ${schema['maximum']}`);
    if (typeof schema['exclusiveMinimum'] === 'number' && value <= schema['exclusiveMinimum']) out.push(`${at}: more than ${schema['exclusiveMinimum']}`);
    if (typeof schema['exclusiveMaximum'] === 'number' && value >= schema['exclusiveMaximum']) out.push(`${at}: less than ${schema['exclusiveMaximum']}`);
  }
  if (Array.isArray(value) && schema['items'] && typeof schema['items'] === 'object') {
    for (const [i, v] of value.entries()) out.push(...schemaProblems(schema['items'] as Schema, v, `${path}[${i}]`));
  }
  if (isType('object', value)) {
    const obj = value as Record<string, unknown>;
    const props = (schema['properties'] ?? {}) as Record<string, Schema>;
    for (const r of (schema['required'] ?? []) as string[]) if (!(r in obj)) out.push(`${path ? `${path}.` : ''}${r}: required`);
    for (const [k, v] of Object.entries(obj)) {
      if (props[k]) out.push(...schemaProblems(props[k], v, path ? `${path}.${k}` : k));
      else if (schema['additionalProperties'] === false) out.push(`${path ? `${path}.` : ''}${k}: not allowed here`);
    }
  }
  return out;
}

function isType(t: string, v: unknown): boolean {
  switch (t) {
    case 'object':
      return typeof v === 'object' && v !== null && !Array.isArray(v);
    case 'array':
      return Array.isArray(v);
    case 'integer':
      return Number.isInteger(v);
    case 'null':
      return v === null;
    default:
      return typeof v === t;
  }
}

function safeTest(pattern: string, value: string): boolean {
  try {
    return new RegExp(pattern, 'u').test(value);
  } catch {
    return true;
  }
}
