import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createFuncRuntime,
  type FuncRunResult,
  type FuncRuntime,
  type HostCallRecord,
  type PendingHostCall,
} from '../../host-functions/index.ts';
import { type BuiltTestModules, buildTestModules, runRequest, TEST_MEMORY_PAGES } from './helpers/test-modules.ts';

type Outcome = 'ok' | 'error' | 'stop';
interface Crash {
  /** The crash happens instead of acting on the result of this run (0-based). */
  atRun: number;
  /** Whether the whole runtime (its workers) is thrown away too. */
  restart: boolean;
}

let modules: BuiltTestModules;
let shared: FuncRuntime;
const newRuntime = () => createFuncRuntime({ loadModule: modules.load, maxMemoryPages: TEST_MEMORY_PAGES });

beforeAll(async () => {
  modules = await buildTestModules(['chain']);
  shared = newRuntime();
});
afterAll(async () => {
  await shared?.close();
  await modules?.cleanup();
});

/** The owning service: answers call n by the scripted outcome and counts how often each n is issued. */
function fakeService(outcomes: readonly Outcome[]) {
  const issued = new Map<number, number>();
  const requests: unknown[] = [];
  return {
    issued,
    requests,
    call(call: PendingHostCall): unknown {
      issued.set(call.n, (issued.get(call.n) ?? 0) + 1);
      requests[call.n] = call.request;
      const outcome = outcomes[call.n] ?? 'stop';
      if (outcome === 'error') return { error: { code: 'DECLINED', message: `call ${call.n} declined`, status: 422 } };
      return { stop: outcome === 'stop', n: call.n, via: call.importName };
    },
  };
}

/**
 * The engine's loop: run, and on a suspension make the call, persist the
 * record, run again. A crash drops what the loop knew except the persisted
 * records (and with `restart`, the runtime and its workers too).
 */
async function drive(input: unknown, outcomes: readonly Outcome[], crashes: readonly Crash[]) {
  const service = fakeService(outcomes);
  const persisted: HostCallRecord[] = [];
  let runtime = shared;
  let run = 0;
  let result: FuncRunResult;
  try {
    while (true) {
      result = await runtime.run(
        runRequest(modules.hash['chain']!, { input, declaredImports: ['step', 'recover'], recorded: [...persisted] }),
      );
      const crash = crashes.find((c) => c.atRun === run++);
      if (crash !== undefined) {
        if (crash.restart) {
          if (runtime !== shared) await runtime.close();
          runtime = newRuntime();
        }
        continue;
      }
      if (result.status !== 'suspended') break;
      expect(result.call.n).toBe(persisted.length);
      persisted.push({ ...result.call, response: service.call(result.call) });
    }
  } finally {
    if (runtime !== shared) await runtime.close();
  }
  return { result, service, persisted };
}

const outcomesArb = fc
  .array(fc.constantFrom<Outcome>('ok', 'error'), { maxLength: 6 })
  .map((xs): Outcome[] => [...xs, 'stop']);
const crashesArb = fc.uniqueArray(fc.record({ atRun: fc.nat({ max: 10 }), restart: fc.boolean() }), {
  maxLength: 3,
  selector: (c) => c.atRun,
});
const inputArb = fc.record({ id: fc.nat(), note: fc.string({ unit: 'grapheme', maxLength: 12 }) });

describe('record and replay', () => {
  it('with crashes at any point, the final output equals an uninterrupted run and each call is issued at most once', async () => {
    await fc.assert(
      fc.asyncProperty(inputArb, outcomesArb, crashesArb, async (input, outcomes, crashes) => {
        const reference = await drive(input, outcomes, []);
        const crashed = await drive(input, outcomes, crashes);
        expect(reference.result.status).toBe('done');
        expect(crashed.result).toEqual(reference.result);
        for (const count of crashed.service.issued.values()) expect(count).toBe(1);
        expect(crashed.service.issued.size).toBe(outcomes.length);
        expect(crashed.service.requests).toEqual(reference.service.requests);

        // A replay from the complete record calls nothing and decides the same.
        const replay = await shared.run(
          runRequest(modules.hash['chain']!, { input, declaredImports: ['step', 'recover'], recorded: crashed.persisted }),
        );
        expect(replay).toEqual(reference.result);
      }),
      { numRuns: 30 },
    );
  });

  it('rerunning from any recorded prefix suspends exactly at the first unrecorded call', async () => {
    const input = { id: 1, note: 'prefix' };
    const { persisted } = await drive(input, ['ok', 'error', 'ok', 'stop'], []);
    for (let k = 0; k < persisted.length; k++) {
      const result = await shared.run(
        runRequest(modules.hash['chain']!, { input, declaredImports: ['step', 'recover'], recorded: persisted.slice(0, k) }),
      );
      const { n, importName, request } = persisted[k]!;
      expect(result).toEqual({ status: 'suspended', call: { n, importName, request } });
    }
  });
});
