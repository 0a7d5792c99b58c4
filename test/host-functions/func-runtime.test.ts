import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFuncRuntime, type FuncLogEntry, type FuncRuntime, type HostCallRecord } from '../../host-functions/index.ts';
import { type BuiltTestModules, buildTestModules, runRequest, TEST_MEMORY_PAGES } from './helpers/test-modules.ts';

let modules: BuiltTestModules;

beforeAll(async () => {
  modules = await buildTestModules(['echo', 'one-call', 'clock', 'chain', 'start-clock', 'counter', 'passthrough']);
});
afterAll(async () => {
  await modules?.cleanup();
});

/** Responses for the chain module: continue twice, then stop. */
function chainResponse(n: number): unknown {
  return n < 2 ? { stop: false, n } : { stop: true, n };
}

// Every behaviour holds the same whether a run happens on this thread or on a worker.
describe.each([{ runInline: true }, { runInline: false }])('FuncRuntime.run (runInline: $runInline)', ({ runInline }) => {
  let runtime: FuncRuntime;
  const logs: FuncLogEntry[] = [];
  beforeAll(() => {
    runtime = createFuncRuntime({ loadModule: modules.load, maxMemoryPages: TEST_MEMORY_PAGES, onLog: (e) => logs.push(e), runInline });
  });
  afterAll(() => runtime?.close());

  it('echoes JSON input, non-ASCII text included, and forwards module logs', async () => {
    const input = { name: 'Zoë Ångström', city: '東京', emoji: '💸', quote: 'say "hi"\n', amount: 12.5, tags: [] };
    const result = await runtime.run(runRequest(modules.hash['echo']!, { input }));
    expect(result).toEqual({ status: 'done', output: { echo: input }, calls: 0 });
    expect(logs).toContainEqual({ moduleHash: modules.hash['echo'], level: 'info', message: `echo ${JSON.stringify(input)}` });
  });

  // The runtime serves the PDK's 8-byte input reads and output writes itself (run-module.mjs):
  // every length mod 8 (the PDK's byte-wise tail), multi-byte text across 8-byte boundaries, 64 KB.
  it('input, output and host requests cross byte for byte at every length mod 8, up to 64 KB', async () => {
    const texts = [...Array.from({ length: 17 }, (_, i) => 'é'.repeat(i % 3) + 'x'.repeat(i) + '€'), '😀a'.repeat(65_536 / 5)];
    for (const text of texts) {
      const input = { text };
      const passed = await runtime.run(runRequest(modules.hash['passthrough']!, { input }));
      expect(passed).toEqual({ status: 'done', output: input, calls: 0 });
      const req = runRequest(modules.hash['one-call']!, { input, declaredImports: ['lookup'] });
      const asked = await runtime.run(req);
      expect(asked).toEqual({ status: 'suspended', call: { n: 0, importName: 'lookup', request: input } });
    }
  });

  it('an unrecorded host call suspends the run; rerun with its response recorded completes', async () => {
    const req = runRequest(modules.hash['one-call']!, { input: { account: 'ä-42' }, declaredImports: ['lookup'] });
    const first = await runtime.run(req);
    expect(first).toEqual({ status: 'suspended', call: { n: 0, importName: 'lookup', request: { account: 'ä-42' } } });
    const recorded: HostCallRecord[] = [{ n: 0, importName: 'lookup', request: { account: 'ä-42' }, response: { balance: '€5' } }];
    const second = await runtime.run({ ...req, recorded });
    expect(second).toEqual({ status: 'done', output: { response: { balance: '€5' } }, calls: 1 });
  });

  it('a permanent-failure response reaches the module as {"error":…}', async () => {
    const error = { error: { code: 'NOT_FOUND', message: 'no such account', status: 404 } };
    const req = runRequest(modules.hash['one-call']!, { input: {}, declaredImports: ['lookup'] });
    const result = await runtime.run({ ...req, recorded: [{ n: 0, importName: 'lookup', request: {}, response: error }] });
    expect(result).toEqual({ status: 'done', output: { response: error }, calls: 1 });
  });

  it('a replay with every call recorded completes without suspending', async () => {
    const req = runRequest(modules.hash['chain']!, { input: { id: 1 }, declaredImports: ['step', 'recover'] });
    const recorded: HostCallRecord[] = [];
    let result = await runtime.run(req);
    while (result.status === 'suspended') {
      recorded.push({ ...result.call, response: chainResponse(result.call.n) });
      result = await runtime.run({ ...req, recorded });
    }
    expect(result.status).toBe('done');
    expect(recorded).toHaveLength(3);
    const replay = await runtime.run({ ...req, recorded });
    expect(replay).toEqual(result);
    expect(replay).toEqual({ status: 'done', output: { responses: [0, 1, 2].map(chainResponse) }, calls: 3 });
  });

  it('recorded requests match regardless of key order (as after a jsonb round trip)', async () => {
    const req = runRequest(modules.hash['one-call']!, { input: { a: 1, b: { c: 2, d: 3 } }, declaredImports: ['lookup'] });
    const recorded = [{ n: 0, importName: 'lookup', request: { b: { d: 3, c: 2 }, a: 1 }, response: 'ok' }];
    expect(await runtime.run({ ...req, recorded })).toMatchObject({ status: 'done', output: { response: 'ok' } });
  });

  it('a recorded call with another request or import name fails FUNC_REPLAY_DIVERGED', async () => {
    const req = runRequest(modules.hash['one-call']!, { input: { account: 1 }, declaredImports: ['lookup', 'other'] });
    const otherRequest = await runtime.run({ ...req, recorded: [{ n: 0, importName: 'lookup', request: { account: 2 }, response: 1 }] });
    expect(otherRequest).toMatchObject({ status: 'failed', error: { code: 'FUNC_REPLAY_DIVERGED' } });
    const otherImport = await runtime.run({ ...req, recorded: [{ n: 0, importName: 'other', request: { account: 1 }, response: 1 }] });
    expect(otherImport).toMatchObject({ status: 'failed', error: { code: 'FUNC_REPLAY_DIVERGED' } });
  });

  it('more recorded calls than the module makes fails FUNC_REPLAY_DIVERGED', async () => {
    const req = runRequest(modules.hash['one-call']!, { input: 1, declaredImports: ['lookup'] });
    const recorded = [
      { n: 0, importName: 'lookup', request: 1, response: 1 },
      { n: 1, importName: 'lookup', request: 1, response: 1 },
    ];
    const result = await runtime.run({ ...req, recorded });
    expect(result).toMatchObject({ status: 'failed', error: { code: 'FUNC_REPLAY_DIVERGED' } });
  });

  it('Date.now and Math.random are served from the clock: same record, same output', async () => {
    const clock = { nowMs: 1_234_567_890_123, seed: 99 };
    const a = await runtime.run(runRequest(modules.hash['clock']!, { clock }));
    const b = await runtime.run(runRequest(modules.hash['clock']!, { clock }));
    expect(a).toEqual(b);
    expect(a).toMatchObject({ status: 'done', output: { now: clock.nowMs } });
    const reseeded = await runtime.run(runRequest(modules.hash['clock']!, { clock: { ...clock, seed: 100 } }));
    expect(reseeded.status === 'done' && a.status === 'done' && reseeded.output).not.toEqual(a.status === 'done' && a.output);
  });

  it('every run gets a fresh instance: a clock read while instantiating is the run\'s own, run after run', async () => {
    // the worker makes the next instance ahead of the run; one whose start function reads the
    // clock cannot be made ahead, and each run must still see its own clock
    const outputs = [];
    for (const nowMs of [1_000, 2_000, 3_000, 4_000]) {
      outputs.push(await runtime.run(runRequest(modules.hash['start-clock']!, { clock: { nowMs, seed: 1 } })));
    }
    expect(outputs.map((r) => r.status === 'done' && r.output)).toEqual([1_000, 2_000, 3_000, 4_000].map((startedAt) => ({ startedAt })));
    // and what one run leaves in the module's globals and memory never shows in the next, whether
    // the worker puts the instance it ran back as it was made or (when a run grew memory) makes a new one
    const counts = [];
    for (const input of [{}, {}, {}, { grow: 1 }, {}, {}]) counts.push(await runtime.run(runRequest(modules.hash['counter']!, { input })));
    const seen = counts.map((r) => r.status === 'done' && r.output);
    expect(seen).toEqual(Array(6).fill({ runs: 1, cells: 1, pages: (seen[0] as { pages: number }).pages }));
  });

  it('refuses at run time a module importing a host function the step does not declare', async () => {
    const result = await runtime.run(runRequest(modules.hash['one-call']!, { declaredImports: [] }));
    expect(result).toMatchObject({ status: 'failed', error: { code: 'FUNC_IMPORT_REFUSED' } });
    expect(result.status === 'failed' && result.error.message).toContain('lookup');
  });

  it('a missing export fails FUNC_EXPORT_NOT_FOUND', async () => {
    const result = await runtime.run(runRequest(modules.hash['echo']!, { exportName: 'nope' }));
    expect(result).toMatchObject({ status: 'failed', error: { code: 'FUNC_EXPORT_NOT_FOUND' } });
  });

  it('malformed requests fail FUNC_BAD_RUN_REQUEST without loading anything', async () => {
    const calls = modules.load.calls;
    const badHash = await runtime.run(runRequest('../../etc/passwd'));
    const badNumbering = await runtime.run(
      runRequest(modules.hash['echo']!, { recorded: [{ n: 1, importName: 'x', request: null, response: null }] }),
    );
    const badInput = await runtime.run(runRequest(modules.hash['echo']!, { input: 10n }));
    for (const r of [badHash, badNumbering, badInput]) {
      expect(r).toMatchObject({ status: 'failed', error: { code: 'FUNC_BAD_RUN_REQUEST' } });
    }
    expect(modules.load.calls).toBe(calls);
  });
});

describe('module loading', () => {
  it('bytes that do not match the requested hash fail FUNC_HASH_MISMATCH', async () => {
    const other = createFuncRuntime({ loadModule: (h) => modules.load(h === 'f'.repeat(64) ? modules.hash['echo']! : h) });
    try {
      const result = await other.run(runRequest('f'.repeat(64)));
      expect(result).toMatchObject({ status: 'failed', error: { code: 'FUNC_HASH_MISMATCH' } });
    } finally {
      await other.close();
    }
  });

  it('a failing loader gives FUNC_MODULE_LOAD_FAILED, and the next run loads again', async () => {
    let fail = true;
    const other = createFuncRuntime({
      loadModule: async (h) => {
        if (fail) throw new Error('ENOENT: no such file');
        return modules.load(h);
      },
    });
    try {
      const first = await other.run(runRequest(modules.hash['echo']!, { input: 1 }));
      expect(first).toMatchObject({ status: 'failed', error: { code: 'FUNC_MODULE_LOAD_FAILED' } });
      fail = false;
      expect(await other.run(runRequest(modules.hash['echo']!, { input: 1 }))).toMatchObject({ status: 'done' });
    } finally {
      await other.close();
    }
  });

  it('concurrent runs of a new module load and compile it once', async () => {
    const other = createFuncRuntime({ loadModule: modules.load, poolSize: 2 });
    try {
      const before = modules.load.calls;
      const results = await Promise.all([1, 2, 3, 4].map((i) => other.run(runRequest(modules.hash['echo']!, { input: i }))));
      expect(results.map((r) => r.status === 'done' && r.output)).toEqual([1, 2, 3, 4].map((i) => ({ echo: i })));
      expect(modules.load.calls - before).toBe(1);
    } finally {
      await other.close();
    }
  });

  it('a closed runtime answers FUNC_RUNTIME_CLOSED', async () => {
    const other = createFuncRuntime({ loadModule: modules.load });
    await other.close();
    expect(await other.run(runRequest(modules.hash['echo']!))).toMatchObject({
      status: 'failed',
      error: { code: 'FUNC_RUNTIME_CLOSED' },
    });
  });
});
