// Per-run cost of Sentin8:Func step modules: `npx tsx bench/func.bench.ts`.
// Each row runs one module sequentially on a warm runtime (pool of 2, one busy)
// and reports microseconds per run, next to doing nothing at all. Runs go back to
// back, so a worker has no idle time to make the next instance ahead of its run:
// the worst case. `npm run bench` measures runs spaced as steps are in the engine.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildAssemblyScriptModule } from '../compiler/modules/build-assemblyscript.ts';
import { createFuncRuntime, type FuncRunRequest, type FuncRuntime } from '../host-functions/index.ts';

const MODULES = fileURLToPath(new URL('../test/host-functions/modules/', import.meta.url));
const BUDGET_MS = 2_000;

interface Row {
  name: string;
  runs: number;
  medianUs: number;
  meanUs: number;
  p99Us: number;
}

async function measure(name: string, once: () => Promise<unknown>): Promise<Row> {
  for (let i = 0; i < 100; i++) await once();
  const samples: number[] = [];
  const end = performance.now() + BUDGET_MS;
  while (performance.now() < end && samples.length < 10_000) {
    const t = performance.now();
    await once();
    samples.push((performance.now() - t) * 1000);
  }
  samples.sort((a, b) => a - b);
  const at = (q: number) => samples[Math.min(samples.length - 1, Math.floor(q * samples.length))] ?? 0;
  const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
  return { name, runs: samples.length, medianUs: at(0.5), meanUs: mean, p99Us: at(0.99) };
}

function payload(bytes: number): { data: string } {
  return { data: 'x'.repeat(Math.max(0, bytes - 11)) };
}

async function main(): Promise<void> {
  const dir = await mkdtemp(path.join(tmpdir(), 'sentin8-func-bench-'));
  let runtime: FuncRuntime | null = null;
  try {
    const build = (name: string) =>
      buildAssemblyScriptModule({ entry: path.join(MODULES, `${name}.as.ts`), outDir: dir, maximumMemoryPages: 64 });
    const pass = await build('passthrough');
    const oneCall = await build('one-call');
    runtime = createFuncRuntime({
      loadModule: async (h) => new Uint8Array(await readFile(path.join(dir, 'modules', `${h}.wasm`))),
      maxMemoryPages: 64,
    });
    const rt = runtime;
    const base = { exportName: 'run', recorded: [], clock: { nowMs: 0, seed: 1 }, timeoutMs: 10_000 };
    const zeroCalls = (input: unknown): FuncRunRequest => ({ ...base, moduleHash: pass.sha256, input, declaredImports: [] });
    const oneRecorded = (input: unknown): FuncRunRequest => ({
      ...base,
      moduleHash: oneCall.sha256,
      input,
      declaredImports: ['lookup'],
      recorded: [{ n: 0, importName: 'lookup', request: input, response: input }],
    });
    const oneSuspends = (input: unknown): FuncRunRequest => ({ ...zeroCalls(input), moduleHash: oneCall.sha256, declaredImports: ['lookup'] });
    const rows: Row[] = [await measure('nothing (await a resolved promise)', async () => {})];
    const cases: [string, FuncRunRequest][] = [
      ['0 host calls, input null', zeroCalls(null)],
      ['0 host calls, 1 KB in/out', zeroCalls(payload(1024))],
      ['0 host calls, 64 KB in/out', zeroCalls(payload(65536))],
      ['1 host call replayed, null', oneRecorded(null)],
      ['1 host call replayed, 1 KB req/resp', oneRecorded(payload(1024))],
      ['1 host call replayed, 64 KB req/resp', oneRecorded(payload(65536))],
      ['1 host call unrecorded → suspended, 1 KB', oneSuspends(payload(1024))],
    ];
    for (const [name, req] of cases) {
      const check = await rt.run(req);
      if (check.status === 'failed') throw new Error(`${name}: ${check.error.code} ${check.error.message}`);
      rows.push(await measure(name, () => rt.run(req)));
    }
    const pad = (s: string, n: number) => s.padEnd(n);
    const num = (x: number) => x.toFixed(1).padStart(10);
    console.log(`\nSentin8:Func per-run cost (Node ${process.version}, µs per run, sequential)\n`);
    console.log(`${pad('case', 44)}${'median'.padStart(10)}${'mean'.padStart(10)}${'p99'.padStart(10)}${'runs'.padStart(8)}`);
    for (const r of rows) {
      console.log(`${pad(r.name, 44)}${num(r.medianUs)}${num(r.meanUs)}${num(r.p99Us)}${String(r.runs).padStart(8)}`);
    }
  } finally {
    await runtime?.close();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
