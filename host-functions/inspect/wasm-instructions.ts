import { WasmReader } from './wasm-reader.ts';

/** One instruction of a function body: its byte range, opcode, and sub-opcode when prefixed. */
export interface Instruction {
  start: number;
  end: number;
  op: number;
  /** The sub-opcode of a prefixed (0xFC, 0xFD, 0xFE) instruction, null otherwise. */
  sub: number | null;
}

/**
 * The instructions of a function body (its byte range in the code section), after its locals.
 * Throws on an opcode this decoder does not know: callers decide what "undecodable" means.
 */
export function* instructionsOf(bytes: Uint8Array, body: { start: number; end: number }): Generator<Instruction> {
  const r = new WasmReader(bytes, body.start, body.end);
  const localGroups = r.uleb();
  for (let i = 0; i < localGroups; i++) {
    r.skipLeb();
    r.skipLeb();
  }
  while (!r.done) {
    const start = r.pos;
    const op = r.byte();
    const sub = op >= 0xfc && op <= 0xfe ? r.uleb() : null;
    skipImmediates(r, op, sub);
    yield { start, end: r.pos, op, sub };
  }
}

/** Whether a function body holds an instruction `match` accepts (throws as `instructionsOf`). */
export function bodyHas(bytes: Uint8Array, body: { start: number; end: number }, match: (op: number, sub: number | null) => boolean): boolean {
  for (const { op, sub } of instructionsOf(bytes, body)) if (match(op, sub)) return true;
  return false;
}

/** Skips a constant expression (a global's or a segment's initial value), its `end` included. */
export function skipConstExpr(r: WasmReader): void {
  for (let op = r.byte(); op !== 0x0b; op = r.byte()) {
    skipImmediates(r, op, op >= 0xfc && op <= 0xfe ? r.uleb() : null);
  }
}

function skipBlockType(r: WasmReader): void {
  const b = r.peek();
  if (b === 0x40 || (b >= 0x6f && b <= 0x7f)) r.skip(1);
  else if (b === 0x63 || b === 0x64) {
    r.skip(1);
    r.skipLeb();
  } else r.skipLeb();
}

function skipMemarg(r: WasmReader): void {
  const align = r.uleb();
  if (align & 0x40) r.skipLeb(); // multi-memory: a memory index follows
  r.skipLeb();
}

function skipLebs(r: WasmReader, n: number): void {
  for (let i = 0; i < n; i++) r.skipLeb();
}

/** Opcodes followed by exactly one LEB128 immediate (branch depth, index, constant, heap type). */
const ONE_LEB = new Set([
  0x07, 0x08, 0x09, 0x0c, 0x0d, 0x10, 0x12, 0x14, 0x15, 0x18, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x3f, 0x40,
  0x41, 0x42, 0xd0, 0xd2, 0xd5, 0xd6,
]);
/** Opcodes without immediates outside the plain numeric range 0x45..0xc4. */
const NO_IMMEDIATE = new Set([0x00, 0x01, 0x05, 0x0b, 0x0f, 0x19, 0x1a, 0x1b, 0xd1, 0xd3, 0xd4]);

/** Skips the immediates of one instruction; throws on an opcode it does not know. */
function skipImmediates(r: WasmReader, op: number, sub: number | null): void {
  if (NO_IMMEDIATE.has(op) || (op >= 0x45 && op <= 0xc4)) return;
  if (ONE_LEB.has(op)) r.skipLeb();
  else if (op === 0x02 || op === 0x03 || op === 0x04 || op === 0x06) skipBlockType(r);
  else if (op === 0x0e) skipLebs(r, r.uleb() + 1);
  else if (op === 0x11 || op === 0x13) skipLebs(r, 2);
  else if (op === 0x1c) r.skip(r.uleb());
  else if (op >= 0x28 && op <= 0x3e) skipMemarg(r);
  else if (op === 0x43) r.skip(4);
  else if (op === 0x44) r.skip(8);
  else if (op === 0xfc) skipMisc(r, sub!);
  else if (op === 0xfd) skipSimd(r, sub!);
  else if (op === 0xfe) {
    if (sub === 0x03) r.skip(1);
    else skipMemarg(r);
  } else throw new Error(`unknown opcode 0x${op.toString(16)}`);
}

/** 0xFC prefix: saturating truncations, bulk memory and table operations. */
function skipMisc(r: WasmReader, sub: number): void {
  if (sub <= 7) return;
  const immediates: Record<number, number> = { 8: 2, 9: 1, 10: 2, 11: 1, 12: 2, 13: 1, 14: 2, 15: 1, 16: 1, 17: 1 };
  const n = immediates[sub];
  if (n === undefined) throw new Error(`unknown 0xfc opcode ${sub}`);
  skipLebs(r, n);
}

/** 0xFD prefix: SIMD. Only loads, stores, constants, shuffles and lane ops carry immediates. */
function skipSimd(r: WasmReader, sub: number): void {
  if (sub <= 11 || sub === 92 || sub === 93) skipMemarg(r);
  else if (sub === 12 || sub === 13) r.skip(16);
  else if (sub >= 21 && sub <= 34) r.skip(1);
  else if (sub >= 84 && sub <= 91) {
    skipMemarg(r);
    r.skip(1);
  }
}
