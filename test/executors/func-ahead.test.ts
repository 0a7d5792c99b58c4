import { describe, expect, it } from 'vitest';
import type { Running } from '../../engine/core/instance.ts';
import { funcExecutor } from '../../engine/executors/func.ts';
import type { FuncRunRequest, FuncRunResult, FuncRuntime } from '../../host-functions/index.ts';
import { makeLogic } from '../contracts/helpers.ts';

// The executor's bookkeeping of a run started ahead (`ahead`), against a runtime that answers at
// once: the engine-level proof, on real modules and Postgres, is in test/engine/func.test.ts.
describe('func executor: a module run started ahead', () => {
  const logic = makeLogic({
    logicId: 'ahead',
    domain: 'test',
    start: 'score',
    modules: { risk: { sha256: 'a'.repeat(64), imports: { lookup: { path: '/lookup' } } } },
    steps: { score: { kind: 'func', module: 'risk' } },
  });
  const def = logic.steps['score'] as Parameters<ReturnType<typeof funcExecutor>>[0];
  const running: Running = { seq: 1, kind: 'step', step: 'score', attempt: 1, generation: 0, input: { a: 1 }, idempotencyKey: 'w1:score:0', budgetStart: 1 };
  const instance = { id: 'w1', ctx: { running } } as never;

  function setUp() {
    const requests: FuncRunRequest[] = [];
    const calls: string[] = [];
    const runtime: FuncRuntime = {
      run: async (req): Promise<FuncRunResult> => {
        requests.push(req);
        return { status: 'suspended', call: { n: 0, importName: 'lookup', request: { q: 1 } } };
      },
      close: async () => {},
    };
    let clock = 1_000;
    const transport = async (call: { idempotencyKey: string }) => {
      calls.push(call.idempotencyKey);
      return { status: 'succeeded' as const, output: { ok: true } };
    };
    const execute = funcExecutor(runtime, transport, () => clock++);
    return { execute, requests, calls };
  }

  it('is taken by the attempt, which records the clock that run was given, and makes the host call only then', async () => {
    const { execute, requests, calls } = setUp();
    execute.ahead!(def, { logic, instance, running, input: running.input, timeoutMs: 1_000 });
    // the run starts once this turn's I/O (the commit it overlaps) has gone out
    expect(requests).toHaveLength(0);
    await new Promise((resolve) => setImmediate(resolve));
    expect(requests).toHaveLength(1);
    expect(calls).toEqual([]);
    const result = await execute(def, { logic, instance, running, input: running.input, headers: {}, timeoutMs: 1_000 });
    expect(requests).toHaveLength(1);
    expect(calls).toEqual(['w1:score:0:call:0']);
    expect(result).toMatchObject({ status: 'progress', record: { clock: requests[0]!.clock } });
  });

  it('is taken once: the next attempt of the same instance runs the module again', async () => {
    const { execute, requests } = setUp();
    execute.ahead!(def, { logic, instance, running, input: running.input, timeoutMs: 1_000 });
    await execute(def, { logic, instance, running, input: running.input, headers: {}, timeoutMs: 1_000 });
    await execute(def, { logic, instance, running, input: running.input, headers: {}, timeoutMs: 1_000 });
    expect(requests).toHaveLength(2);
  });
});
