import { unstorableText } from '../../contracts/storable-text.ts';
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

/**
 * The first reason `value` cannot be stored, or null. One walk with an explicit stack (so a
 * value nested 200,000 deep costs no recursion) checks depth, NUL characters and lone surrogates
 * in strings and keys, and bounds the JSON size from above; only a value whose bound passes
 * `maxBytes` is serialized to measure it exactly. A 1 KB output costs a few microseconds.
 */
export function storableProblem(value: unknown, maxBytes: number): StorableProblem | null {
  // upper bound of the UTF-8 JSON size: a UTF-16 unit is at most 6 bytes (\u00XX), a number 24
  let bound = 0;
  const root: Entry = { v: value, depth: 0, key: null, parent: null };
  const scalar = scalarBound(value);
  if (typeof scalar === 'string') return { kind: 'unstorable', path: '$', why: scalar };
  bound += scalar;
  // only arrays and objects are pushed; their scalar members are checked where they are met
  const stack: Entry[] = scalar === 0 ? [root] : [];
  while (stack.length > 0) {
    const e = stack.pop()!;
    if (e.depth >= MAX_DEPTH) return { kind: 'unstorable', path: pathOf(e), why: `nests deeper than ${MAX_DEPTH} levels` };
    const v = e.v as Record<string, unknown> | unknown[];
    if (Array.isArray(v)) {
      bound += 2 + v.length;
      for (let i = v.length - 1; i >= 0; i--) {
        const b = scalarBound(v[i]);
        if (typeof b === 'string') return { kind: 'unstorable', path: pathOf({ v: v[i], depth: 0, key: i, parent: e }), why: b };
        if (b === 0) stack.push({ v: v[i], depth: e.depth + 1, key: i, parent: e });
        bound += b;
      }
    } else {
      bound += 2;
      for (const k of Object.keys(v)) {
        const kb = scalarBound(k);
        if (typeof kb === 'string') return { kind: 'unstorable', path: `${pathOf(e)} (a key)`, why: kb };
        const b = scalarBound(v[k]);
        if (typeof b === 'string') return { kind: 'unstorable', path: pathOf({ v: v[k], depth: 0, key: k, parent: e }), why: b };
        if (b === 0) stack.push({ v: v[k], depth: e.depth + 1, key: k, parent: e });
        bound += kb + b + 2;
      }
    }
  }
  if (bound <= maxBytes) return null;
  const bytes = Buffer.byteLength(JSON.stringify(value ?? null), 'utf8');
  return bytes > maxBytes ? { kind: 'too_large', bytes, max: maxBytes } : null;
}

/**
 * A scalar's bound on its JSON bytes, why it cannot be stored (a string), or 0 for an array or
 * an object (walked on its own). A bigint or a function is left to JSON.stringify, which refuses
 * it as it would at commit.
 */
function scalarBound(v: unknown): number | string {
  if (typeof v === 'string') return unstorableText(v) ?? 6 * v.length + 2;
  if (typeof v === 'number') return Number.isFinite(v) ? 24 : `is ${v}, not a JSON number`;
  if (v !== null && typeof v === 'object') return 0;
  return 5;
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
