/**
 * What Postgres can hold, checked before a value reaches a commit (ARCHITECTURE.md, Limits). A
 * value jsonb or timestamptz refuses would fail its commit on every try, and the instance would
 * stay claimed and unrecorded until its lease lapsed and the step ran again. Pure and iterative:
 * the core uses the time bounds, the runtime and the executors the value check.
 */

/** The default largest JSON (UTF-8 bytes) the engine stores as one value: an input, a step's result. */
export const DEFAULT_MAX_INPUT_BYTES = 1024 * 1024;

/**
 * The deepest nesting of arrays and objects a stored value may have. Postgres' jsonb allows more,
 * but JSON.stringify, JSONata and zod recurse: far below the depth at which they overflow the stack.
 */
export const MAX_DEPTH = 512;

/** The longest delay, deadline or retry wait the engine schedules: 100 years. */
export const MAX_WAIT_MS = 100 * 365 * 24 * 3600 * 1000;

/** Timestamps the engine stores (`until`): years 1 to 9999, well inside timestamptz's range. */
const MIN_INSTANT_MS = -62_135_596_800_000; // 0001-01-01T00:00:00Z
const MAX_INSTANT_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/** Why a value cannot be stored: over the size cap, or something jsonb or the engine cannot hold. */
export type StorableProblem =
  | { kind: 'too_large'; bytes: number; max: number }
  | { kind: 'unstorable'; path: string; why: string };

// String.prototype.isWellFormed (ES2024, Node 20): false for a string holding a lone surrogate
const isWellFormed = (String.prototype as unknown as { isWellFormed: (this: string) => boolean }).isWellFormed;

/**
 * The first reason `value` cannot be stored, or null. One walk with an explicit stack (so a
 * value nested 200,000 deep costs no recursion) checks depth, NUL characters and lone surrogates
 * in strings and keys, and bounds the JSON size from above; only a value whose bound passes
 * `maxBytes` is serialized to measure it exactly. A 1 KB output costs a few microseconds.
 */
export function storableProblem(value: unknown, maxBytes: number): StorableProblem | null {
  // upper bound of the UTF-8 JSON size: a UTF-16 unit is at most 6 bytes (\u00XX), a number 24
  let bound = 0;
  const stack: Entry[] = [{ v: value, depth: 0, key: null, parent: null }];
  while (stack.length > 0) {
    const e = stack.pop()!;
    const v = e.v;
    if (typeof v === 'string') {
      const why = badString(v);
      if (why !== null) return { kind: 'unstorable', path: pathOf(e), why };
      bound += 6 * v.length + 2;
    } else if (typeof v === 'number') {
      if (!Number.isFinite(v)) return { kind: 'unstorable', path: pathOf(e), why: `is ${v}, not a JSON number` };
      bound += 24;
    } else if (v !== null && typeof v === 'object') {
      if (e.depth >= MAX_DEPTH) return { kind: 'unstorable', path: pathOf(e), why: `nests deeper than ${MAX_DEPTH} levels` };
      bound += 2;
      if (Array.isArray(v)) {
        for (let i = v.length - 1; i >= 0; i--) stack.push({ v: v[i], depth: e.depth + 1, key: i, parent: e });
        bound += v.length;
      } else {
        for (const k of Object.keys(v)) {
          const why = badString(k);
          if (why !== null) return { kind: 'unstorable', path: `${pathOf(e)} (a key)`, why };
          bound += 6 * k.length + 4;
          stack.push({ v: (v as Record<string, unknown>)[k], depth: e.depth + 1, key: k, parent: e });
        }
      }
    } else {
      // null, a boolean (a bigint or a function is refused by JSON.stringify, as it would be at commit)
      bound += 5;
    }
  }
  if (bound <= maxBytes) return null;
  const bytes = Buffer.byteLength(JSON.stringify(value ?? null), 'utf8');
  return bytes > maxBytes ? { kind: 'too_large', bytes, max: maxBytes } : null;
}

/** A value met on the walk; its path is built only when it is the one reported. */
interface Entry {
  v: unknown;
  depth: number;
  key: string | number | null;
  parent: Entry | null;
}

function pathOf(e: Entry): string {
  const parts: string[] = [];
  for (let at: Entry | null = e; at !== null && at.key !== null; at = at.parent) parts.push(typeof at.key === 'number' ? `[${at.key}]` : `.${at.key}`);
  return `$${parts.reverse().join('')}`;
}

function badString(s: string): string | null {
  if (s.includes('\0')) return 'holds a NUL character (\\u0000)';
  if (!isWellFormed.call(s)) return 'holds a lone UTF-16 surrogate (not valid Unicode)';
  return null;
}

/** Why a timestamp (ms since the epoch) cannot be scheduled, or null: years 1 to 9999. */
export function instantProblem(ms: number): string | null {
  if (!Number.isFinite(ms)) return 'is not a time';
  if (ms < MIN_INSTANT_MS || ms > MAX_INSTANT_MS) return `${new Date(ms).toISOString()} is outside the years 1 to 9999`;
  return null;
}

/** Why a wait (ms) cannot be scheduled, or null: at most MAX_WAIT_MS (100 years). */
export function waitProblem(ms: number): string | null {
  if (!Number.isFinite(ms) || ms < 0) return `${ms} ms is not a wait`;
  return ms > MAX_WAIT_MS ? `${ms} ms is longer than the engine schedules (${MAX_WAIT_MS} ms, 100 years)` : null;
}
