/**
 * Compile-time benchmark (not a test): `tsx bench/compile.bench.ts`.
 *
 * Generates workflow definition files in a scratch project and measures a cold compile of 1 and of
 * 100 files, then the incremental recompile of one changed file in a 100-file session (what
 * `s8flow compile --watch` does per change, without the file-watcher's debounce).
 * Target: the incremental recompile stays under 1 s at 100 files.
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createCompiler } from '../compiler/index.ts';

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
  return { dir, dispose: () => rmSync(dir, { recursive: true, force: true }) };
}

async function cold(files: number): Promise<number> {
  const p = project(files);
  const t0 = performance.now();
  const session = await createCompiler({ root: p.dir });
  const result = await session.compile();
  const ms = performance.now() - t0;
  if (result.versions.length !== files) throw new Error('unexpected version count');
  await session.close();
  p.dispose();
  return ms;
}

async function incremental(files: number, rounds: number): Promise<number[]> {
  const p = project(files);
  const session = await createCompiler({ root: p.dir });
  await session.compile();
  const times: number[] = [];
  for (let r = 1; r <= rounds; r++) {
    const file = join(p.dir, 'flow7.ts');
    writeFileSync(file, definition(7, r));
    const t0 = performance.now();
    const result = await session.compile([file]);
    times.push(performance.now() - t0);
    if (result.written.length !== 3) throw new Error(`expected 3 artifacts rewritten, got ${result.written.join(', ')}`);
  }
  await session.close();
  p.dispose();
  return times;
}

const fmt = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const one = await cold(1);
const hundred = await cold(100);
const inc = await incremental(100, 5);
console.log(`cold compile,   1 file:   ${fmt(one)}`);
console.log(`cold compile, 100 files:  ${fmt(hundred)}`);
console.log(`incremental recompile of 1 changed file at 100 files: median ${fmt(median(inc))} (runs: ${inc.map(fmt).join(', ')}; target < 1 s)`);
