import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, test, vi } from 'vitest';
import { compileCommand } from '../../cli/commands/compile.ts';
import { publishCommand } from '../../cli/commands/publish.ts';
import { EXAMPLES, flowSource, scratchProject } from './project-helpers.ts';

const scratch = scratchProject({
  'broken/flow.ts': flowSource(
    "export const f = workflow({ logicId: 'cli.broken', version: 1, domain: 'cli', input: z.object({}) })\n  .pass('p', { input: () => Math.random() });",
  ),
});
afterAll(() => scratch.dispose());
afterEach(() => vi.restoreAllMocks());

function capture() {
  const out: string[] = [];
  const err: string[] = [];
  vi.spyOn(process.stdout, 'write').mockImplementation((s) => out.push(String(s)) > 0);
  vi.spyOn(process.stderr, 'write').mockImplementation((s) => err.push(String(s)) > 0);
  return { out: () => out.join(''), err: () => err.join('') };
}

describe('s8flow compile and publish commands', () => {
  test('compile exits 0 and lists the compiled versions', async () => {
    const io = capture();
    const out = join(scratch.dir, 'dist');
    expect(await compileCommand([EXAMPLES, '--out', out, '--lock', join(scratch.dir, 'flow.lock.json')])).toBe(0);
    expect(io.out()).toMatch(/compiled 5 workflow version\(s\)/);
    expect(io.out()).toMatch(/payments\.capture@2 {2}sha256:/);
    expect(existsSync(join(out, 'manifest.json'))).toBe(true);
  });

  test('compile exits 1 and prints each problem as file:line:col - CODE', async () => {
    const io = capture();
    expect(await compileCommand([join(scratch.dir, 'broken'), '--out', join(scratch.dir, 'broken-out')])).toBe(1);
    expect(io.err()).toMatch(/^flow\.ts:5:29 - COMPILE_EXPR_NONDETERMINISTIC: Math\.random\(\) is not deterministic/m);
  });

  test('publish exits 0, then reports the versions as already published', async () => {
    const io = capture();
    const to = join(scratch.dir, 'engine');
    expect(await publishCommand(['--from', join(scratch.dir, 'dist'), '--to', to])).toBe(0);
    expect(await publishCommand(['--from', join(scratch.dir, 'dist'), '--to', to])).toBe(0);
    expect(io.out()).toMatch(/\+ payments\.capture@2/);
    expect(io.out()).toMatch(/= payments\.capture@2 \(already published, same hash\)/);
  });

  test('publish to a URL without a token is a usage error naming --token', async () => {
    const saved = process.env['FLOW_TOKEN'];
    delete process.env['FLOW_TOKEN'];
    try {
      await expect(publishCommand(['--to', 'https://engine.example'])).rejects.toMatchObject({ code: 'CLI_USAGE', message: expect.stringContaining('--token') });
    } finally {
      if (saved !== undefined) process.env['FLOW_TOKEN'] = saved;
    }
  });
});
