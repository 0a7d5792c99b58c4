import { FlowError } from '../../contracts/errors.ts';

/** The default largest JSON (UTF-8 bytes) a start input, event payload, decision payload or completion may be. */
export const DEFAULT_MAX_INPUT_BYTES = 1024 * 1024;

/** A lone UTF-16 surrogate: JSON.stringify escapes it, and Postgres' jsonb refuses the escape. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

export class InputTooLarge extends FlowError {
  constructor(what: string, bytes: number, max: number) {
    super('FLOW_INPUT_TOO_LARGE', `${what} is ${bytes} bytes of JSON; the engine accepts at most ${max} (maxInputBytes)`, { status: 413 });
  }
}

export class InputUnstorable extends FlowError {
  constructor(what: string, path: string, why: string) {
    super('FLOW_INPUT_UNSTORABLE', `${what} cannot be stored: ${path} ${why}`, { status: 422, details: [{ path, why }] });
  }
}

/**
 * Checks a caller's JSON before anything is written: not larger than `maxBytes`, and holding no
 * string Postgres' jsonb cannot store (a NUL character, a lone surrogate). Refused here, it never
 * reaches a transaction — where jsonb would refuse it with a bare SQL error, or, inside a step's
 * output, hold the instance in a commit that can never succeed.
 */
export function checkStorable(what: string, value: unknown, maxBytes: number): void {
  const text = JSON.stringify(value ?? null);
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > maxBytes) throw new InputTooLarge(what, bytes, maxBytes);
  // NUL and lone surrogates show up as \u escapes in the JSON text; walk only when one might be there
  if (text.includes('\\u0000') || /\\ud[89a-f]/i.test(text)) walk(what, value, '$');
}

function walk(what: string, value: unknown, path: string): void {
  if (typeof value === 'string') checkString(what, value, path);
  else if (Array.isArray(value)) for (const [i, v] of value.entries()) walk(what, v, `${path}[${i}]`);
  else if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      checkString(what, k, `${path} (a key)`);
      walk(what, v, `${path}.${k}`);
    }
  }
}

function checkString(what: string, s: string, path: string): void {
  if (s.includes('\0')) throw new InputUnstorable(what, path, 'holds a NUL character (\\u0000)');
  if (LONE_SURROGATE.test(s)) throw new InputUnstorable(what, path, 'holds a lone UTF-16 surrogate (not valid Unicode)');
}
