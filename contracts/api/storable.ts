import { z } from 'zod';

/**
 * What Postgres can hold, as zod checks for request schemas: text without NUL or lone surrogates
 * (`text` and `jsonb` refuse both), integers in `int4`, instants in a `timestamptz` year, and JSON
 * no deeper than `MAX_JSON_DEPTH`. A request that breaks one is the caller's mistake (422
 * FLOW_SCHEMA_INVALID), found before anything is written, not a data exception from the database.
 */

export const PG_INT_MAX = 2_147_483_647;

/** Deeper request JSON is refused: Postgres and the engine's own recursive walks stay far from their stack limits. */
export const MAX_JSON_DEPTH = 256;

/** A UTF-16 surrogate without its pair. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

export const isStorableText = (s: string): boolean => !s.includes('\0') && !LONE_SURROGATE.test(s);

const TEXT_MESSAGE = 'text may not hold a NUL (\\u0000) or a lone UTF-16 surrogate';

/** A string Postgres can store: `text(1, 200)` is `z.string().min(1).max(200)` without NUL or lone surrogates. */
export function text(min: number, max: number) {
  return z.string().min(min).max(max).refine(isStorableText, TEXT_MESSAGE);
}

/** A positive integer in Postgres `int4`, from a path or query string. */
export const PgIntParam = z.coerce.number().int().min(1).max(PG_INT_MAX);

/**
 * An ISO 8601 instant with offset that names a real calendar date (no 30 February) in years
 * 1 to 9999, which every `timestamptz` holds.
 */
export function isStorableInstant(s: string): boolean {
  const ms = Date.parse(s);
  if (Number.isNaN(ms)) return false;
  const m = /^(\d{4})-(\d\d)-(\d\d)T/.exec(s);
  if (m === null || Number(m[1]) < 1) return false;
  // Date.parse rolls 2024-02-30 over into March: compare the calendar date it kept
  const day = new Date(Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3])));
  return day.getUTCFullYear() === Number(m[1]) && day.getUTCMonth() === Number(m[2]) - 1 && day.getUTCDate() === Number(m[3]);
}

export const Instant = z.iso.datetime({ offset: true }).refine(isStorableInstant, 'a real date in years 0001 to 9999');

/**
 * Whether `value` nests deeper than `maxDepth` arrays and objects. Walks with its own stack, so a
 * value nested far past the limit (a 1 MiB body holds 500,000 levels) is refused without
 * overflowing the walk, or the engine's later recursive ones (JSON.stringify, hashing, JSONata).
 */
export function nestsDeeperThan(value: unknown, maxDepth: number): boolean {
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (depth >= maxDepth) return true;
    for (const child of Object.values(v)) stack.push([child, depth + 1]);
  }
  return false;
}

/** A zod refinement: adds an issue when `v` nests deeper than `MAX_JSON_DEPTH`. */
export function refineDepth(v: unknown, ctx: z.RefinementCtx): void {
  if (nestsDeeperThan(v, MAX_JSON_DEPTH)) ctx.addIssue({ code: 'custom', message: `JSON may nest at most ${MAX_JSON_DEPTH} deep` });
}

/**
 * Any JSON value of a request the store can take, as far as its shape goes: at most
 * `MAX_JSON_DEPTH` deep. Strings inside it (NUL, lone surrogates) and its size are checked by the
 * engine itself (FLOW_INPUT_UNSTORABLE, FLOW_INPUT_TOO_LARGE), for in-process callers too.
 */
export const StorableJson: z.ZodType<unknown> = z.unknown().superRefine(refineDepth);
