/**
 * Compile-time benchmark (not a test): `tsx bench/compile.bench.ts`.
 *
 * Generates workflow definition files in a scratch project and measures:
 * - a cold compile of 1 file in a new process (`s8flow compile`, what a one-off or CI compile
 *   costs), against `tsc --noEmit` of the same file with the same options in a new process, run
 *   alternately in the same run: the baseline is "just type-checking it";
 * - a cold compile session of 1 and of 100 files in a process that has already loaded the
 *   compiler (what `s8flow dev` pays when a new definition file restarts its session);
 * - the incremental recompile of one changed file in a 100-file session (what `s8flow dev` and
 *   `s8flow compile --watch` do per edit, without the file-watcher's debounce).
 * Goals (docs/performance.md): cold compile of one file ≤ 1.5 s, incremental recompile at 100 files ≤ 150 ms.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createCompiler } from '../compiler/index.ts';
import { reportGoal, verdict } from './support.ts';

const REPO = fileURLToPath(new URL('../', import.meta.url));

function definition(i: number, variant = 0): string {
  return `import { workflow } from 'sentin8-flow/sdk';
import { z } from 'zod';

export const flow${i} = workflow({
  logicId: 'bench.flow${i}',
  version: 1,
  domain: 'bench',
  input: z.object({ id: z.string(), amount: z.number(), items: z.array(z.object({ sku: z.string(), qty: z.int() })) }),
})
  .proxy('reserve', {
    path: '/reserve/${variant}',
    input: ({ input }) => ({ id: input.id, cents: Math.round(input.amount * 100) }),
    output: z.object({ reservationId: z.string() }),
    compensate: { kind: 'proxy', path: '/release', input: ({ steps }) => ({ id: steps.reserve?.reservationId }) },
  })
  .choice('large', { branches: [{ when: ({ input }) => input.amount > 1000, next: 'approve' }], otherwise: 'ship' })
  .decision('approve', { options: ['yes', 'no'], deadline: 'P1D' })
  .proxy('ship', {
    path: '/ship',
    input: ({ input, steps }) => ({
      reservation: steps.reserve.reservationId,
      lines: input.items.filter((it) => it.qty > 0).map((it) => ({ sku: it.sku, qty: it.qty })),
      label: \`order \${input.id} (\${input.items.length} items)\`,
    }),
  })
  .emit('done', { event: 'bench.done', payload: ({ input }) => ({ id: input.id }) });
`;
}

function project(files: number): { dir: string; dispose(): void } {
  mkdirSync(join(REPO, '.tmp'), { recursive: true });
  const dir = mkdtempSync(join(REPO, '.tmp', 'bench-'));
  mkdirSync(join(dir, 'node_modules'));
  symlinkSync(REPO, join(dir, 'node_modules', 'sentin8-flow'), 'dir');
  for (let i = 0; i < files; i++) writeFileSync(join(dir, `flow${i}.ts`), definition(i));
  // The repository's compiler options, limited to the definitions: what both tsc and the compiler see.
  writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ extends: '../../tsconfig.json', include: ['*.ts'] }));
  return { dir, dispose: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Wall time of `node <args>` in a new process, which must exit 0. */
function timedProcess(args: string[], cwd: string): number {
  const t0 = performance.now();
  const run = spawnSync(process.execPath, args, { cwd, encoding: 'utf8' });
  const ms = performance.now() - t0;
  if (run.status !== 0) throw new Error(`node ${args.join(' ')} exited ${run.status}: ${run.stdout}${run.stderr}`);
  return ms;
}

/** Alternating runs of `s8flow compile` and `tsc --noEmit` on one file, each in a new process. */
function coldProcesses(rounds: number): { compile: number[]; tsc: number[] } {
  const p = project(1);
  const out = { compile: [] as number[], tsc: [] as number[] };
  for (let r = 0; r < rounds; r++) {
    out.tsc.push(timedProcess([join(REPO, 'node_modules/typescript/bin/tsc'), '--noEmit', '-p', '.'], p.dir));
    out.compile.push(timedProcess([join(REPO, 'bin/s8flow.mjs'), 'compile', '.'], p.dir));
  }
  p.dispose();
  return out;
}

/**
 * Wall time and this process's CPU time (user + system, all its threads; esbuild's process not
 * included) of `work`. On a shared box the wall time grows with everyone's load; the CPU time
 * much less, so it is the steadier of the two for comparing runs.
 */
async function timed<T>(work: () => Promise<T>): Promise<{ value: T; ms: number; cpuMs: number }> {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const value = await work();
  const ms = performance.now() - t0;
  const c = process.cpuUsage(c0);
  return { value, ms, cpuMs: (c.user + c.system) / 1000 };
}

async function cold(files: number): Promise<{ ms: number; cpuMs: number }> {
  const p = project(files);
  let session: Awaited<ReturnType<typeof createCompiler>> | undefined;
  const { value: result, ms, cpuMs } = await timed(async () => {
    session = await createCompiler({ root: p.dir });
    return session.compile();
  });
  if (result.versions.length !== files) throw new Error('unexpected version count');
  await session?.close();
  p.dispose();
  return { ms, cpuMs };
}

async function incremental(files: number, rounds: number): Promise<{ times: number[]; cpu: number[] }> {
  const p = project(files);
  const session = await createCompiler({ root: p.dir });
  await session.compile();
  const times: number[] = [];
  const cpu: number[] = [];
  for (let r = 1; r <= rounds; r++) {
    const file = join(p.dir, 'flow7.ts');
    writeFileSync(file, definition(7, r));
    const { value: result, ms, cpuMs } = await timed(() => session.compile([file]));
    times.push(ms);
    cpu.push(cpuMs);
    if (result.written.length !== 3) throw new Error(`expected 3 artifacts rewritten, got ${result.written.join(', ')}`);
  }
  await session.close();
  p.dispose();
  return { times, cpu };
}

const fmt = (ms: number) => (ms < 1000 ? `${ms.toFixed(0)} ms` : `${(ms / 1000).toFixed(2)} s`);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const runs = (xs: number[]) => `runs: ${xs.map(fmt).join(', ')}`;
const goal = (ms: number, limit: number) => `goal ≤ ${fmt(limit)}: ${ms <= limit ? 'met' : 'missed'}`;

const procs = coldProcesses(3);
const one = await cold(1);
const hundred = await cold(100);
const inc = await incremental(100, 5);
const [compileMs, tscMs, incMs, incCpu] = [median(procs.compile), median(procs.tsc), median(inc.times), median(inc.cpu)];
const cpu = (ms: number) => `process CPU ${fmt(ms)}`;
console.log(`cold compile, 1 file, new process (s8flow compile): median ${fmt(compileMs)} (${runs(procs.compile)}); ${goal(compileMs, 1500)}`);
console.log(`  baseline tsc --noEmit, same file and options, new process: median ${fmt(tscMs)} (${runs(procs.tsc)}); compile/tsc ${(compileMs / tscMs).toFixed(2)}`);
console.log(`cold session in a loaded process (s8flow dev restart),   1 file:  ${fmt(one.ms)} (${cpu(one.cpuMs)})`);
console.log(`cold session in a loaded process (s8flow dev restart), 100 files: ${fmt(hundred.ms)} (${cpu(hundred.cpuMs)})`);
console.log(
  `incremental recompile of 1 changed file at 100 files: median ${fmt(incMs)} (${runs(inc.times)}), ${cpu(incCpu)}; ${goal(incMs, 150)}; ${(incMs / hundred.ms).toFixed(3)} of the cold 100-file session`,
);
reportGoal({
  case: 'compile: one file, cold (`s8flow compile`, new process)',
  clients: '1',
  result: `${fmt(compileMs)} (median of ${procs.compile.length})`,
  vs: `${(compileMs / tscMs).toFixed(2)} of \`tsc --noEmit\` of the same file (${fmt(tscMs)})`,
  goal: verdict('≤ 1.5 s', compileMs <= 1500, fmt(compileMs)),
});
reportGoal({
  case: 'compile: one changed file of 100, incremental',
  clients: '1',
  result: `${fmt(incMs)} (median of ${inc.times.length})`,
  vs: `${(incMs / hundred.ms).toFixed(3)} of a cold 100-file session`,
  goal: verdict('≤ 150 ms', incMs <= 150, fmt(incMs)),
});
