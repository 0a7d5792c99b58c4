import { describe, expect, it } from 'vitest';
import type { RunTask } from '../../host-functions/runtime/protocol.ts';
import { runModule } from '../../host-functions/runtime/run-module.mjs';
import { engineModule, I32, I64, rawModule } from './helpers/wasm-binary.ts';

/** Signed LEB128 of an i64 immediate. */
function sleb(v: bigint): number[] {
  const out: number[] = [];
  for (;;) {
    const b = Number(v & 0x7fn);
    v >>= 7n;
    if ((v === 0n && (b & 0x40) === 0) || (v === -1n && (b & 0x40) !== 0)) return [...out, b];
    out.push(b | 0x80);
  }
}

const env = (name: string, params: number[], results: number[] = []) => ({ module: 'extism:host/env', name, params, results });
/** Imports, in index order: alloc 0, store_u8 1, store_u64 2, output_set 3. */
const imports = [env('alloc', [I64], [I64]), env('store_u8', [I64, I32]), env('store_u64', [I64, I64]), env('output_set', [I64, I64])];
const ADDR = [0x41, 0x00, 0x29, 0x03, 0x00]; // i32.const 0; i64.load: the last block's address, kept at memory 0

/**
 * A module that allocates `blocks` blocks of 9 bytes and writes `"abcdefg"` into the last: the
 * quote with store_u8 at offset 0, the other eight bytes with one store_u64 at offset 1, then
 * sets it as the output.
 */
function writesIntoBlock(blocks: number): Uint8Array {
  const alloc = [0x41, 0x00, 0x42, 0x09, 0x10, 0x00, 0x37, 0x03, 0x00]; // mem[0] = alloc(9)
  const body = [
    ...Array.from({ length: blocks }, () => alloc).flat(),
    ...ADDR, 0x41, 0x22, 0x10, 0x01, // store_u8(addr, '"')
    ...ADDR, 0x42, 0x01, 0x7c, 0x42, ...sleb(0x2267666564636261n), 0x10, 0x02, // store_u64(addr + 1, 'abcdefg"')
    ...ADDR, 0x42, 0x09, 0x10, 0x03, // output_set(addr, 9)
    0x41, 0x00,
  ];
  return rawModule({ imports, functions: { run: body } });
}

const task = (bytes: Uint8Array): RunTask => ({
  id: 0, moduleHash: 'test', module: engineModule(bytes), state: null, exportName: 'run', inputJson: '{}',
  declaredImports: [], recorded: [], clock: { nowMs: 0, seed: 1 }, maxHostAllocBytes: 1 << 20,
});

describe('runModule', () => {
  // An Extism address is the block's index times 2^48 plus the offset in it. Past block 31 it no
  // longer fits a double exactly, and an odd offset is where a split in double arithmetic would go wrong.
  it.each([3, 40])('writes 8 bytes at an odd offset of the last of %i blocks allocated, as Extism would', async (blocks) => {
    const { outcome } = await runModule(task(writesIntoBlock(blocks)), () => {});
    expect(outcome).toEqual({ kind: 'done', output: 'abcdefg', calls: 0 });
  });
});
