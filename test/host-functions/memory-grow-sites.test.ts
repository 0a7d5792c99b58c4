import { describe, expect, it } from 'vitest';
import { memoryGrowFunctions } from '../../host-functions/inspect/memory-grow-sites.ts';
import { readSections } from '../../host-functions/inspect/wasm-sections.ts';
import { engineValidates, I64, rawModule } from './helpers/wasm-binary.ts';

describe('memoryGrowFunctions', () => {
  it('finds the functions that execute memory.grow, numbered after the imports', () => {
    const wasm = rawModule({
      imports: [{ module: 'extism:host/user', name: 'a', params: [I64], results: [I64] }],
      functions: {
        plain: [0x41, 0x01],
        grows: [0x41, 0x01, 0x40, 0x00],
      },
    });
    expect([...memoryGrowFunctions(wasm, readSections(wasm))]).toEqual([2]);
  });

  it('does not mistake an empty block type (0x40) or constants containing 0x40 for memory.grow', () => {
    const wasm = rawModule({
      functions: {
        // block (empty type) ; i32.const 64 ; drop ; end ; i64.const 64 ; drop ; f64.const ; drop ; i32.const 0
        tricky: [0x02, 0x40, 0x41, 0xc0, 0x00, 0x1a, 0x0b, 0x42, 0xc0, 0x00, 0x1a, 0x44, 0, 0, 0, 0, 0, 0, 0x40, 0x40, 0x1a, 0x41, 0x00],
      },
    });
    expect(engineValidates(wasm)).toBe(true);
    expect(memoryGrowFunctions(wasm, readSections(wasm)).size).toBe(0);
  });
});
