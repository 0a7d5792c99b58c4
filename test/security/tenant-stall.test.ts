import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFuncRuntime, type FuncRunResult } from '../../host-functions/index.ts';
import { type BuiltTestModules, buildTestModules, runRequest, TEST_MEMORY_PAGES } from '../host-functions/helpers/test-modules.ts';

/**
 * No tenant stalls another through the module runtime: a module that never returns holds no
 * worker past its timeout (counted from when it was queued), gives way when its run is aborted,
 * and never keeps another env's run from a worker.
 */

let modules: BuiltTestModules;
beforeAll(async () => {
  modules = await buildTestModules(['misbehave', 'echo']);
}, 120_000);
afterAll(async () => {
  await modules?.cleanup();
});

const FOREVER = 2_147_483_647;
const spin = (queue: string, signal?: AbortSignal, timeoutMs = FOREVER) =>
  runRequest(modules.hash['misbehave']!, { exportName: 'loop', input: 'x', timeoutMs, queue, ...(signal ? { signal } : {}) });
const echo = (queue: string, input: unknown, timeoutMs = 60_000) => runRequest(modules.hash['echo']!, { input, timeoutMs, queue });

/** Settles to whether `p` had resolved by the time `other` did. */
async function settledFirst(other: Promise<unknown>, p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(() => (done = true));
  await other;
  return done;
}

describe('the module runtime under a spinning tenant', () => {
  it("a run's timeout counts from when it was queued: one queued behind a spinner of its env fails FUNC_TIMEOUT", async () => {
    const runtime = createFuncRuntime({ loadModule: modules.load, maxMemoryPages: TEST_MEMORY_PAGES, poolSize: 1, runInline: false });
    try {
      const stop = new AbortController();
      const spinner = runtime.run(spin('a', stop.signal));
      const queued = await runtime.run(echo('a', 1, 300));
      expect(queued).toMatchObject({ status: 'failed', error: { code: 'FUNC_TIMEOUT' } });
      stop.abort();
      await spinner;
    } finally {
      await runtime.close();
    }
  });

  it("another env's run completes while two spinners of one env hold both workers", async () => {
    const runtime = createFuncRuntime({ loadModule: modules.load, maxMemoryPages: TEST_MEMORY_PAGES, poolSize: 2, runInline: false });
    try {
      const stop = new AbortController();
      const spinners = Promise.all([runtime.run(spin('a', stop.signal)), runtime.run(spin('a', stop.signal))]);
      const other = runtime.run(echo('b', 'b'));
      // the spinners never end on their own: the other env's run must come first
      expect(await settledFirst(other, spinners)).toBe(false);
      expect(await other).toEqual({ status: 'done', output: { echo: 'b' }, calls: 0 });
      stop.abort();
      await spinners;
    } finally {
      await runtime.close();
    }
  });

  it('aborting a run in flight stops its worker (FUNC_ABORTED) and a replacement serves the next runs', async () => {
    const runtime = createFuncRuntime({ loadModule: modules.load, maxMemoryPages: TEST_MEMORY_PAGES, poolSize: 1, runInline: false });
    try {
      const stop = new AbortController();
      const spinner = runtime.run(spin('a', stop.signal));
      const queued = new AbortController();
      const waiting = runtime.run({ ...echo('a', 0), signal: queued.signal });
      queued.abort();
      expect(await waiting).toMatchObject({ status: 'failed', error: { code: 'FUNC_ABORTED' } });
      stop.abort();
      const result: FuncRunResult = await spinner;
      expect(result).toMatchObject({ status: 'failed', error: { code: 'FUNC_ABORTED' } });
      const after = await Promise.all([1, 2].map((i) => runtime.run(echo('a', i))));
      expect(after).toEqual([1, 2].map((i) => ({ status: 'done', output: { echo: i }, calls: 0 })));
    } finally {
      await runtime.close();
    }
  });

  it('close() returns while a spinner runs, and the spinner ends FUNC_RUNTIME_CLOSED', async () => {
    const runtime = createFuncRuntime({ loadModule: modules.load, maxMemoryPages: TEST_MEMORY_PAGES, poolSize: 1, runInline: false });
    const spinner = runtime.run(spin('a'));
    await runtime.run(echo('b', 0)).catch(() => {});
    await runtime.close();
    expect(await spinner).toMatchObject({ status: 'failed', error: { code: 'FUNC_RUNTIME_CLOSED' } });
  });
});
