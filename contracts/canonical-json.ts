import { createHash } from 'node:crypto';

/**
 * RFC 8785 (JSON Canonicalization Scheme) serialisation.
 *
 * Object keys are sorted by UTF-16 code units (what `Array.prototype.sort` does by default), and
 * numbers and strings use ECMAScript's own serialisation, which is exactly what JCS prescribes.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value === 'boolean' || typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TypeError(`canonical JSON cannot hold the number ${value}`);
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v === undefined ? null : v)).join(',')}]`;
  if (typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  throw new TypeError(`canonical JSON cannot hold a ${typeof value}`);
}

export function sha256Hex(data: string | Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}

/** `sha256:<hex>` of the canonical JSON of a LogicVersion without its `hash` and `source` fields. */
export function logicVersionHash(doc: Record<string, unknown>): string {
  const { hash: _hash, source: _source, ...rest } = doc;
  return `sha256:${sha256Hex(canonicalJson(rest))}`;
}

/** True when `doc.hash` is the content hash of `doc`. */
export function verifyLogicVersionHash(doc: Record<string, unknown>): boolean {
  return typeof doc['hash'] === 'string' && doc['hash'] === logicVersionHash(doc);
}
