import type { WasmSections } from './wasm-sections.ts';

/** Section ids in the order a module must hold them (custom sections, id 0, may sit anywhere). */
const ORDER = [1, 2, 3, 4, 5, 13, 6, 7, 8, 9, 12, 10, 11];
const encoder = new TextEncoder();

/**
 * The module with the payloads of some sections replaced, or added where the module has none
 * (at the place the binary format requires). Every other byte is kept as it was.
 */
export function withSections(bytes: Uint8Array, sections: WasmSections, payloads: ReadonlyMap<number, Uint8Array>): Uint8Array {
  const parts: Uint8Array[] = [bytes.subarray(0, 8)];
  const pending = new Map(payloads);
  const flushBefore = (id: number) => {
    for (const [pid, payload] of pending) {
      if (ORDER.indexOf(pid) < ORDER.indexOf(id)) {
        parts.push(section(pid, payload));
        pending.delete(pid);
      }
    }
  };
  for (const s of sections.sections) {
    if (s.id !== 0) flushBefore(s.id);
    const payload = pending.get(s.id);
    pending.delete(s.id);
    parts.push(payload === undefined ? bytes.subarray(s.start, s.end) : section(s.id, payload));
  }
  for (const [pid, payload] of pending) parts.push(section(pid, payload));
  return concat(parts);
}

/** A vector section's payload with `added` entries after its existing ones (an empty one if absent). */
export function appendEntries(bytes: Uint8Array, sections: WasmSections, id: number, existing: number, added: Uint8Array[]): Uint8Array {
  const old = sections.sections.find((s) => s.id === id);
  const entries = old === undefined ? new Uint8Array(0) : bytes.subarray(old.payload + lebLength(bytes, old.payload), old.end);
  return concat([uleb(existing + added.length), entries, ...added]);
}

/** An export entry: its name, kind (0 function, 1 table, 2 memory, 3 global) and index. */
export function exportEntry(name: string, kind: number, index: number): Uint8Array {
  const text = encoder.encode(name);
  return concat([uleb(text.length), text, Uint8Array.of(kind), uleb(index)]);
}

function section(id: number, payload: Uint8Array): Uint8Array {
  return concat([Uint8Array.of(id), uleb(payload.length), payload]);
}

export function uleb(n: number): Uint8Array {
  const out: number[] = [];
  do {
    const low = n % 128;
    n = Math.floor(n / 128);
    out.push(n > 0 ? low | 0x80 : low);
  } while (n > 0);
  return Uint8Array.from(out);
}

/** Signed LEB128 of a non-negative integer below 2^53. */
export function slebPositive(n: number): Uint8Array {
  const out: number[] = [];
  for (;;) {
    const low = n % 128;
    n = Math.floor(n / 128);
    // done once the rest is zero and the sign bit (0x40) of this byte says positive
    if (n === 0 && (low & 0x40) === 0) {
      out.push(low);
      return Uint8Array.from(out);
    }
    out.push(low | 0x80);
  }
}

function lebLength(bytes: Uint8Array, at: number): number {
  let n = 1;
  while (bytes[at + n - 1]! & 0x80) n++;
  return n;
}

export function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((sum, p) => sum + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
