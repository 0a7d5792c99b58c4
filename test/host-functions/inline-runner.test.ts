import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createFuncRuntime } from '../../host-functions/index.ts';
import { INLINE_FUEL, InlineRunner } from '../../host-functions/runtime/inline-runner.ts';
import { ModuleCache } from '../../host-functions/runtime/module-cache.ts';
import type { RunTask } from '../../host-functions/runtime/protocol.ts';
import { type BuiltTestModules, buildTestModules, runRequest, TEST_MEMORY_PAGES } from './helpers/test-modules.ts';

// The runner alone: which runs it keeps on the calling thread and which it hands back (null) for
// a worker. What the runtime reports either way is in func-runtime*.test.ts.
describe('InlineRunner', () => {
  let modules: BuiltTestModules;
  let cache: ModuleCache;
  beforeAll(async () => {
    modules = await buildTestModules(['echo', 'start-clock', 'misbehave']);
    cache = new ModuleCache(modules.load, TEST_MEMORY_PAGES, 8, INLINE_FUEL);
  });
  afterAll(() => modules.cleanup());

  const task = async (name: string, exportName = 'run', input: unknown = {}): Promise<RunTask> => {
    const loaded = await cache.get(modules.hash[name]!);
    if (loaded.inline === null) throw new Error(`${name} has no inline copy`);
    return {
      id: 0, moduleHash: loaded.hash, ...loaded.inline, exportName, inputJson: JSON.stringify(input), declaredImports: [],
      recorded: [], clock: { nowMs: 5, seed: 1 }, maxHostAllocBytes: 1 << 24,
    };
  };

  it('runs a module on this thread and passes its log lines on once it counts', async () => {
    const runner = new InlineRunner(8);
    const logs: string[] = [];
    const outcome = await runner.run(await task('echo', 'run', 7), (_level, message) => logs.push(message));
    expect(outcome).toEqual({ kind: 'done', output: { echo: 7 }, calls: 0 });
    expect(logs).toEqual(['echo 7']);
  });

  it('hands back a run that ran out of fuel', async () => {
    expect(await new InlineRunner(8).run(await task('misbehave', 'loop', 'x'), () => {})).toBeNull();
  });

  it('leaves to workers a module whose start function touches the host', async () => {
    const runner = new InlineRunner(8);
    expect(await runner.run(await task('start-clock'), () => {})).toBeNull();
  });

  it('keeps an instance for each of a module\'s overlapping runs, so later rounds make none', async () => {
    const runtime = createFuncRuntime({ loadModule: modules.load, maxMemoryPages: TEST_MEMORY_PAGES });
    const wasm = (globalThis as unknown as { WebAssembly: { instantiate: (...a: unknown[]) => unknown } }).WebAssembly;
    const made = vi.spyOn(wasm, 'instantiate');
    try {
      for (let round = 0; round < 5; round++) {
        const runs = await Promise.all(Array.from({ length: 8 }, (_, i) => runtime.run(runRequest(modules.hash['echo']!, { input: i }))));
        expect(runs.map((r) => r.status === 'done' && r.output)).toEqual(Array.from({ length: 8 }, (_, i) => ({ echo: i })));
      }
      // one instance per run that overlapped another in the first round, none after
      expect(made.mock.calls.length).toBeLessThanOrEqual(8);
    } finally {
      made.mockRestore();
      await runtime.close();
    }
  });
});
