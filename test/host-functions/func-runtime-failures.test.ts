import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFuncRuntime, type FuncLogEntry, type FuncRuntime } from '../../host-functions/index.ts';
import { type BuiltTestModules, buildTestModules, runRequest, TEST_MEMORY_PAGES } from './helpers/test-modules.ts';

let modules: BuiltTestModules;
let runtime: FuncRuntime;
const logs: FuncLogEntry[] = [];

beforeAll(async () => {
  modules = await buildTestModules(['misbehave', 'echo', 'start-trap']);
  runtime = createFuncRuntime({ loadModule: modules.load, maxMemoryPages: TEST_MEMORY_PAGES, poolSize: 2, onLog: (e) => logs.push(e) });
});
afterAll(async () => {
  await runtime?.close();
  await modules?.cleanup();
});

const misbehave = (exportName: string, timeoutMs = 5_000) =>
  runtime.run(runRequest(modules.hash['misbehave']!, { exportName, timeoutMs, input: 'x' }));

describe('a misbehaving module fails its run, and only its run', () => {
  it('an endless loop fails FUNC_TIMEOUT while other runs and the parent event loop carry on', async () => {
    let ticks = 0;
    const interval = setInterval(() => ticks++, 10);
    try {
      const started = Date.now();
      const looping = misbehave('loop', 1_500);
      // While the loop occupies one worker, the other serves runs, and timers fire on this thread.
      const echoes: unknown[] = [];
      for (let i = 0; i < 5; i++) {
        echoes.push(await runtime.run(runRequest(modules.hash['echo']!, { input: i })));
      }
      await new Promise((resolve) => setTimeout(resolve, 300));
      const ticksDuringLoop = ticks;
      const result = await looping;
      expect(result).toMatchObject({ status: 'failed', error: { code: 'FUNC_TIMEOUT' } });
      expect(Date.now() - started).toBeGreaterThanOrEqual(1_400);
      expect(echoes).toEqual([0, 1, 2, 3, 4].map((i) => ({ status: 'done', output: { echo: i }, calls: 0 })));
      expect(ticksDuringLoop).toBeGreaterThan(10);
    } finally {
      clearInterval(interval);
    }
    // The terminated worker was replaced: both workers serve again.
    const after = await Promise.all([1, 2].map((i) => runtime.run(runRequest(modules.hash['echo']!, { input: i }))));
    expect(after.map((r) => r.status)).toEqual(['done', 'done']);
  });

  it('a run that logs and then loops logs once: its run on this thread ran out of fuel and counts for nothing', async () => {
    // the timeout counts from the queue: 500 ms once ran out under load (CI, load 10) before the
    // module had logged anything; the run must reach its log, then loop until the timeout
    const result = await misbehave('logThenLoop', 3_000);
    expect(result).toMatchObject({ status: 'failed', error: { code: 'FUNC_TIMEOUT' } });
    expect(logs.filter((e) => e.message === 'about to loop')).toHaveLength(1);
  });

  it('growing linear memory past the cap fails FUNC_MEMORY', async () => {
    const result = await misbehave('hugeAlloc');
    expect(result).toMatchObject({ status: 'failed', error: { code: 'FUNC_MEMORY' } });
    expect(result.status === 'failed' && result.error.message).toContain(`${TEST_MEMORY_PAGES} pages`);
  });

  it('a buffer larger than AssemblyScript can allocate fails FUNC_MEMORY', async () => {
    const result = await misbehave('impossibleAlloc');
    expect(result).toMatchObject({ status: 'failed', error: { code: 'FUNC_MEMORY' } });
    expect(result.status === 'failed' && result.error.message).toContain('Invalid length');
  });

  it('a trap in the module start function fails FUNC_TRAP with its message', async () => {
    const result = await runtime.run(runRequest(modules.hash['start-trap']!));
    expect(result).toMatchObject({ status: 'failed', error: { code: 'FUNC_TRAP' } });
    expect(result.status === 'failed' && result.error.message).toContain('failed while starting');
  });

  it('a huge Extism host-memory allocation fails FUNC_MEMORY', async () => {
    expect(await misbehave('hugeHostAlloc')).toMatchObject({ status: 'failed', error: { code: 'FUNC_MEMORY' } });
  });

  it('a throw fails FUNC_TRAP carrying the module message and source location', async () => {
    const result = await misbehave('abortWithMessage');
    expect(result).toMatchObject({ status: 'failed', error: { code: 'FUNC_TRAP' } });
    const message = result.status === 'failed' ? result.error.message : '';
    expect(message).toContain('card declined: insufficient funds');
    expect(message).toMatch(/misbehave\.as\.ts:\d+:\d+/);
  });

  it('a bare trap fails FUNC_TRAP naming the trap', async () => {
    expect(await misbehave('bareTrap')).toEqual({
      status: 'failed',
      error: { code: 'FUNC_TRAP', message: 'module trapped: unreachable' },
    });
  });

  it('runaway recursion fails FUNC_TRAP as a stack overflow', async () => {
    const result = await misbehave('deepRecursion');
    expect(result).toMatchObject({ status: 'failed', error: { code: 'FUNC_TRAP' } });
    expect(result.status === 'failed' && result.error.message).toContain('stack overflow');
  });

  it('a missing or non-JSON output fails FUNC_BAD_OUTPUT', async () => {
    expect(await misbehave('noOutput')).toMatchObject({ status: 'failed', error: { code: 'FUNC_BAD_OUTPUT' } });
    expect(await misbehave('notJson')).toMatchObject({ status: 'failed', error: { code: 'FUNC_BAD_OUTPUT' } });
  });

  it('after every kind of failure the same runtime still runs modules', async () => {
    expect(await runtime.run(runRequest(modules.hash['echo']!, { input: 'still here' }))).toEqual({
      status: 'done',
      output: { echo: 'still here' },
      calls: 0,
    });
  });

  it('close() ends a looping run at once with FUNC_RUNTIME_CLOSED', async () => {
    const other = createFuncRuntime({ loadModule: modules.load, maxMemoryPages: TEST_MEMORY_PAGES, poolSize: 1 });
    const looping = other.run(runRequest(modules.hash['misbehave']!, { exportName: 'loop', timeoutMs: 60_000 }));
    await new Promise((resolve) => setTimeout(resolve, 500));
    const started = Date.now();
    await other.close();
    expect(await looping).toMatchObject({ status: 'failed', error: { code: 'FUNC_RUNTIME_CLOSED' } });
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});
