/** A translated JSONata fragment; `atom` fragments need no parentheses as operands. */
export interface J {
  readonly code: string;
  readonly atom: boolean;
}

export const atom = (code: string): J => ({ code, atom: true });
export const op = (code: string): J => ({ code, atom: false });

/** The fragment as an operand of a larger expression. */
export function operand(j: J): string {
  return j.atom ? j.code : `(${j.code})`;
}

const PLAIN_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const RESERVED = new Set(['and', 'or', 'in', 'true', 'false', 'null', 'function']);

/** A field name in a JSONata path: bare when it can be, else in backticks. */
export function fieldName(name: string): string | null {
  if (PLAIN_NAME.test(name) && !RESERVED.has(name)) return name;
  return name.includes('`') ? null : `\`${name}\``;
}

/** A JSONata string literal (JSON escapes are valid JSONata escapes). */
export function stringLiteral(value: string): string {
  return JSON.stringify(value);
}

/** JSONata built-ins a lambda parameter must not shadow. */
const BUILTINS = new Set(
  'sum count max min average string substring substringBefore substringAfter lowercase uppercase length trim pad match contains replace split join number abs floor ceil round power sqrt random boolean not exists map filter reduce sift keys lookup append spread merge sort reverse shuffle distinct zip each error assert type eval now millis toMillis fromMillis formatNumber formatBase formatInteger parseInteger base64encode base64decode encodeUrl encodeUrlComponent decodeUrl decodeUrlComponent single'.split(
    ' ',
  ),
);

/** A JSONata variable for a TypeScript parameter name, never shadowing a built-in function. */
export function variableName(name: string): string | null {
  if (!PLAIN_NAME.test(name)) return null;
  return BUILTINS.has(name) ? `$${name}_` : `$${name}`;
}
