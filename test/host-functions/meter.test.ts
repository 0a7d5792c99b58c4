import { describe, expect, it } from 'vitest';
import { FUEL_EXPORT, meter } from '../../host-functions/inspect/meter.ts';
import { readSections } from '../../host-functions/inspect/wasm-sections.ts';
import { engineValidates, rawModule } from './helpers/wasm-binary.ts';

/** The tsconfig types WebAssembly's namespace but not its runtime values (see wasm-api.ts). */
const W = (globalThis as unknown as {
  WebAssembly: { Module: new (b: Uint8Array) => object; Instance: new (m: object, imports: object) => { exports: Record<string, unknown> } };
}).WebAssembly;

/** Meters `bytes` with `fuel`, instantiates it, and calls `run`: its result or its trap, and the fuel left. */
function runMetered(bytes: Uint8Array, fuel: number): { result: number | string; left: bigint } {
  const metered = meter(bytes, readSections(bytes), fuel, engineValidates);
  if (metered === null) throw new Error('not metered');
  const { exports } = new W.Instance(new W.Module(metered), {});
  let result: number | string;
  try {
    result = (exports['run'] as () => number)();
  } catch (err) {
    result = (err as Error).message;
  }
  return { result, left: (exports[FUEL_EXPORT] as { value: bigint }).value };
}

const i32 = (n: number) => [0x41, ...sleb(n)];
function sleb(n: number): number[] {
  const out: number[] = [];
  for (;;) {
    const b = n & 0x7f;
    n >>= 7;
    if ((n === 0 && (b & 0x40) === 0) || (n === -1 && (b & 0x40) !== 0)) return [...out, b];
    out.push(b | 0x80);
  }
}
/** mem[0] += 1 until it reaches `n`, then return it: a loop with no call in it. */
const counting = (n: number) => [
  0x03, 0x40, // loop
  ...i32(0), ...i32(0), 0x28, 0x02, 0x00, ...i32(1), 0x6a, 0x36, 0x02, 0x00, // mem[0] = mem[0] + 1
  ...i32(0), 0x28, 0x02, 0x00, ...i32(n), 0x49, 0x0d, 0x00, // br_if 0 (mem[0] < n)
  0x0b, // end loop
  ...i32(0), 0x28, 0x02, 0x00,
];

describe('meter', () => {
  it('charges every loop iteration: a loop stops with a trap once its fuel is spent', () => {
    const bytes = rawModule({ functions: { run: counting(1_000_000) } });
    const plenty = runMetered(bytes, 1e12);
    expect(plenty.result).toBe(1_000_000);
    const used = 1e12 - Number(plenty.left);
    expect(used).toBeGreaterThan(1_000_000 * 10); // each iteration is 14 instructions
    expect(used).toBeLessThan(1_000_000 * 20);
    const short = runMetered(bytes, 100_000);
    expect(short.result).toBe('unreachable');
    expect(short.left).toBeLessThan(0n);
  });

  it('charges a function on entry, even without a loop', () => {
    const bytes = rawModule({ functions: { run: i32(7) } });
    expect(runMetered(bytes, 10).result).toBe(7);
    expect(runMetered(bytes, 0).result).toBe('unreachable');
  });

  it('charges a bulk memory instruction by its byte count', () => {
    // memory.fill 64 KiB: 4,096 units of 16 bytes
    const bytes = rawModule({ functions: { run: [...i32(0), ...i32(0), ...i32(65_536), 0xfc, 0x0b, 0x00, ...i32(7)] } });
    expect(runMetered(bytes, 5_000).result).toBe(7);
    expect(runMetered(bytes, 4_000).result).toBe('unreachable');
  });

  it('leaves alone a module it cannot meter', () => {
    // table.fill works in proportion to a count the meter does not charge
    const bytes = rawModule({ table: { min: 1 }, functions: { run: [...i32(0), 0xd0, 0x70, ...i32(1), 0xfc, 0x11, 0x00, ...i32(0)] } });
    expect(engineValidates(bytes)).toBe(true);
    expect(meter(bytes, readSections(bytes), 1000, engineValidates)).toBeNull();
  });
});
