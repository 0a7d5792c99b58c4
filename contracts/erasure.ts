/**
 * What erasure leaves where a value was (an instance's input and outputs, its attempts' inputs
 * and outputs, its journal's payloads): a tombstone saying when. The engine, the console and the
 * CLI recognise it the same way.
 */
export const ERASED_KEY = '$erased';

export interface Tombstone {
  $erased: true;
  /** When the value was erased (ISO 8601). */
  at: string;
  /** An erased error keeps its code. */
  code?: string;
}

export function tombstone(at: Date): Tombstone {
  return { $erased: true, at: at.toISOString() };
}

/** True when `v` is what erasure left. */
export function isTombstone(v: unknown): v is Tombstone {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && (v as Record<string, unknown>)[ERASED_KEY] === true;
}
