import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exposeState } from '../../host-functions/inspect/expose-state.ts';
import { readSections } from '../../host-functions/inspect/wasm-sections.ts';
import { type BuiltTestModules, buildTestModules } from './helpers/test-modules.ts';
import { I64, rawModule } from './helpers/wasm-binary.ts';

/** The tsconfig types WebAssembly's namespace but not its runtime values (see wasm-api.ts). */
const { Module } = (globalThis as unknown as {
  WebAssembly: { Module: { new (bytes: Uint8Array): object; exports(m: object): unknown[]; imports(m: object): unknown[] } };
}).WebAssembly;
const expose = (bytes: Uint8Array) => exposeState(bytes, readSections(bytes));

describe('exposeState', () => {
  let modules: BuiltTestModules;
  beforeAll(async () => {
    modules = await buildTestModules(['counter']);
  });
  afterAll(() => modules.cleanup());

  it('exports an AssemblyScript module\'s memory and every mutable global, and changes nothing else', async () => {
    const bytes = await modules.load(modules.hash['counter']!);
    const sections = readSections(bytes);
    const exposed = expose(bytes);
    expect(exposed).not.toBeNull();
    const mutable = sections.globals.filter((g) => g.mutable).length;
    expect(mutable).toBeGreaterThan(0);
    expect(exposed!.names.memories).toEqual(['sentin8:state:memory:0']);
    expect(exposed!.names.globals).toHaveLength(mutable);

    const module = new Module(exposed!.bytes);
    const before = Module.exports(new Module(bytes));
    expect(Module.exports(module)).toEqual([
      ...before,
      ...exposed!.names.memories.map((name) => ({ name, kind: 'memory' })),
      ...exposed!.names.globals.map((name) => ({ name, kind: 'global' })),
    ]);
    expect(Module.imports(module)).toEqual(Module.imports(new Module(bytes)));
    // every section but the exports is byte for byte the same
    const rest = (b: Uint8Array) => readSections(b).sections.filter((s) => s.id !== 7).map((s) => Buffer.from(b.subarray(s.start, s.end)).toString('hex'));
    expect(rest(exposed!.bytes)).toEqual(rest(bytes));
  });

  it('refuses a module whose state also lives in tables, dropped segments or Extism vars', () => {
    const i32 = [0x41, 0x00];
    expect(expose(rawModule({ functions: { run: i32 } }))).not.toBeNull();
    // table.set 0 (i32.const 0, ref.null func)
    expect(expose(rawModule({ functions: { run: [...i32, 0xd0, 0x70, 0x26, 0x00, ...i32] } }))).toBeNull();
    // data.drop 0
    expect(expose(rawModule({ functions: { run: [0xfc, 0x09, 0x00, ...i32] } }))).toBeNull();
    // table.grow 0
    expect(expose(rawModule({ functions: { run: [0xd0, 0x70, ...i32, 0xfc, 0x0f, 0x00] } }))).toBeNull();
    expect(expose(rawModule({ imports: [{ module: 'extism:host/env', name: 'var_set', params: [I64, I64] }] }))).toBeNull();
    // a body this decoder cannot read (0xff is no opcode)
    expect(expose(rawModule({ functions: { run: [0xff, ...i32] } }))).toBeNull();
  });
});
