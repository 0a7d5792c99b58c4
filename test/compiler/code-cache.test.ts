import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterEach, expect, test } from 'vitest';
import { scratchProject } from './project-helpers.ts';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const CODE_CACHE = pathToFileURL(join(REPO, 'compiler/code-cache.ts')).href;

let dir: string;
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** Runs ES module `script` in a new process (under tsx) whose temporary directory is `tmp`; its stdout. */
function runInNewProcess(tmp: string, script: string): string {
  const run = spawnSync(process.execPath, ['--import', 'tsx/esm', '--input-type=module', '-e', script], {
    cwd: REPO,
    env: { ...process.env, TMPDIR: tmp },
    encoding: 'utf8',
  });
  expect(run.stderr).toBe('');
  return run.stdout.trim();
}

/** Requires `fixture` through withCodeCache, calls it, then saves the cache, in a new process. */
const loadInNewProcess = (tmp: string, fixture: string) =>
  runInNewProcess(
    tmp,
    `import { createRequire } from 'node:module';
import { saveCodeCache, withCodeCache } from ${JSON.stringify(CODE_CACHE)};
const m = withCodeCache(() => createRequire(import.meta.url)(${JSON.stringify(fixture)}));
console.log(m.answer(20));
saveCodeCache();`,
  );

test('a CommonJS file loads the same without a code cache, with it, and with a corrupt one, which is rewritten', () => {
  dir = mkdtempSync(join(tmpdir(), 'code-cache-'));
  const fixture = join(dir, 'fixture.cjs');
  writeFileSync(fixture, 'exports.answer = (n) => [n, 22].reduce((a, b) => a + b, 0);\n');
  const cacheFile = () => {
    const [sub] = readdirSync(dir).filter((d) => d.startsWith('sentin8-flow-code-cache-'));
    const files = sub === undefined ? [] : readdirSync(join(dir, sub)).map((f) => join(dir, sub, f));
    expect(files).toHaveLength(1);
    return files[0]!;
  };

  expect(loadInNewProcess(dir, fixture)).toBe('42');
  const written = cacheFile();
  const firstWrite = statSync(written).mtimeMs;

  // Accepted: V8 took the data, so nothing is written again.
  expect(loadInNewProcess(dir, fixture)).toBe('42');
  expect(statSync(written).mtimeMs).toBe(firstWrite);

  // Rejected: the file compiles from source, and the cache is replaced by good data.
  writeFileSync(written, 'not V8 cached data');
  expect(loadInNewProcess(dir, fixture)).toBe('42');
  expect(readFileSync(written, 'utf8')).not.toBe('not V8 cached data');
  expect(loadInNewProcess(dir, fixture)).toBe('42');
});

test("a compile writes the cache as soon as it is done, while the checker's bytecode is all there, not at exit", () => {
  dir = mkdtempSync(join(tmpdir(), 'code-cache-'));
  const project = scratchProject({
    'flow.ts': `import { workflow } from 'sentin8-flow/sdk';
import { z } from 'zod';
export const flow = workflow({ logicId: 'cache.flow', version: 1, domain: 'cache', input: z.object({ id: z.string() }) })
  .proxy('one', { path: '/one', input: ({ input }) => ({ id: input.id }) });
`,
  });
  try {
    const script = `import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { createCompiler } from ${JSON.stringify(pathToFileURL(join(REPO, 'compiler/index.ts')).href)};
const session = await createCompiler({ root: ${JSON.stringify(project.dir)}, write: false });
await session.compile();
const [sub] = readdirSync(${JSON.stringify(dir)}).filter((d) => d.startsWith('sentin8-flow-code-cache-'));
const files = sub === undefined ? [] : readdirSync(join(${JSON.stringify(dir)}, sub));
const ts = files.find((f) => f.includes('_typescript.js-'));
console.log(JSON.stringify({ files: files.length, typescriptBytes: ts === undefined ? 0 : statSync(join(${JSON.stringify(dir)}, sub, ts)).size }));
await session.close();`;
    const seen = JSON.parse(runInNewProcess(dir, script)) as { files: number; typescriptBytes: number };
    // ts-morph's and zod's files, typescript.js's with the checker's bytecode (3.8 MB on Node 20)
    expect(seen.files).toBeGreaterThan(10);
    expect(seen.typescriptBytes).toBeGreaterThan(3_000_000);
  } finally {
    project.dispose();
  }
});
