import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterEach, expect, test } from 'vitest';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const CODE_CACHE = pathToFileURL(join(REPO, 'compiler/code-cache.ts')).href;

let dir: string;
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** Requires `fixture` through withCodeCache in a new process whose temporary directory is `tmp`. */
function loadInNewProcess(tmp: string, fixture: string): string {
  const script = `import { createRequire } from 'node:module';
import { withCodeCache } from ${JSON.stringify(CODE_CACHE)};
const m = withCodeCache(() => createRequire(import.meta.url)(${JSON.stringify(fixture)}));
console.log(m.answer(20));`;
  const run = spawnSync(process.execPath, ['--import', 'tsx/esm', '--input-type=module', '-e', script], {
    cwd: REPO,
    env: { ...process.env, TMPDIR: tmp },
    encoding: 'utf8',
  });
  expect(run.stderr).toBe('');
  return run.stdout.trim();
}

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

  // Accepted: V8 took the data, so nothing is written again at exit.
  expect(loadInNewProcess(dir, fixture)).toBe('42');
  expect(statSync(written).mtimeMs).toBe(firstWrite);

  // Rejected: the file compiles from source, and the cache is replaced by good data.
  writeFileSync(written, 'not V8 cached data');
  expect(loadInNewProcess(dir, fixture)).toBe('42');
  expect(readFileSync(written, 'utf8')).not.toBe('not V8 cached data');
  expect(loadInNewProcess(dir, fixture)).toBe('42');
});
