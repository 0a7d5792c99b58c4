import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
// @ts-expect-error: plain JavaScript without declarations (it runs before TypeScript can load)
import { freshBundle } from '../../bin/cli-bundle.mjs';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
type Loaded = { main: () => Promise<{ value: number; data: string; lazy: string }> };
let root: string;
const build = (): Promise<string> => freshBundle({ root, entry: join(root, 'main.ts'), cacheDir: join(root, 'cache') });
const load = async (bundle: string) => ((await import(pathToFileURL(bundle).href)) as Loaded).main();
/**
 * Writes a source dated in the past, each write a second after the last: a bundle is reused only
 * when its sources are older than the two seconds before its build (an edit may race the build).
 */
let clock = 0;
function put(name: string, text: string): void {
  writeFileSync(join(root, name), text);
  clock += 1;
  utimesSync(join(root, name), clock, clock);
}
const source = (value: number) => `export const value: number = ${value};\nexport const data = new URL('./data.txt', import.meta.url).href;\n`;

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 's8flow-bundle-'));
  clock = Math.floor(Date.now() / 1000) - 3600;
  put('main.ts', `import { data, value } from './b.ts';\nexport async function main() {\n  const { lazy } = await import('./lazy.ts');\n  return { value, data, lazy };\n}\n`);
  put('b.ts', source(1));
  put('lazy.ts', `export const lazy: string = 'loaded on demand';\n`);
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

describe('the CLI bundle (bin/cli-bundle.mjs)', () => {
  it("runs the sources' code, each with its own import.meta.url, and loads dynamic imports on demand", async () => {
    const bundle = await build();
    expect(bundle.startsWith(join(root, 'cache'))).toBe(true);
    expect(await load(bundle)).toEqual({ value: 1, data: pathToFileURL(join(root, 'data.txt')).href, lazy: 'loaded on demand' });
  });

  it('is built once while its sources stay as they are', async () => {
    const first = await build();
    expect(await build()).toBe(first);
  });

  it('is built again once a source changes size, or only its mtime', async () => {
    const first = await build();
    put('b.ts', source(22));
    const second = await build();
    expect(second).not.toBe(first);
    expect((await load(second)).value).toBe(22);

    put('b.ts', source(33)); // same size as 22: only the mtime tells
    const third = await build();
    expect(third).not.toBe(second);
    expect((await load(third)).value).toBe(33);
  });

  it('is not reused when a source changed while it was being built, or just before', async () => {
    const soon = new Date(Date.now() + 60_000); // as if edited during the build
    utimesSync(join(root, 'b.ts'), soon, soon);
    const first = await build();
    expect((await load(first)).value).toBe(1);
    expect(await build()).not.toBe(first);

    writeFileSync(join(root, 'b.ts'), source(4)); // now: within the two seconds before the next build
    const next = await build();
    expect((await load(next)).value).toBe(4);
    expect(await build()).not.toBe(next);
  });

  it('is built again once the bundler itself changes', async () => {
    // a copy under the repository (so it resolves esbuild), whose mtime the test may move
    mkdirSync(join(REPO, '.tmp'), { recursive: true });
    const copyDir = mkdtempSync(join(REPO, '.tmp', 'bundler-'));
    try {
      const copy = join(copyDir, 'cli-bundle.mjs');
      copyFileSync(join(REPO, 'bin/cli-bundle.mjs'), copy);
      const { freshBundle: viaCopy } = (await import(pathToFileURL(copy).href)) as { freshBundle: typeof freshBundle };
      const opts = { root, entry: join(root, 'main.ts'), cacheDir: join(root, 'cache') };
      const first: string = await viaCopy(opts);
      expect(await viaCopy(opts)).toBe(first);
      const later = new Date(statSync(copy).mtimeMs + 60_000);
      utimesSync(copy, later, later);
      expect(await viaCopy(opts)).not.toBe(first);
    } finally {
      rmSync(copyDir, { recursive: true, force: true });
    }
  });

  it('keeps a replaced bundle for a day after it was replaced, however old it is, then removes it', async () => {
    const twoDaysAgo = new Date(Date.now() - 2 * 24 * 3600_000);
    const a = dirname(await build());
    utimesSync(a, twoDaysAgo, twoDaysAgo); // built long ago, in use until now
    put('b.ts', source(2));
    const b = dirname(await build());
    expect(existsSync(a)).toBe(true); // replaced just now: a process started from it may still load chunks

    utimesSync(a, twoDaysAgo, twoDaysAgo); // as if replaced two days ago
    put('b.ts', source(3));
    await build();
    expect(existsSync(a)).toBe(false);
    expect(existsSync(b)).toBe(true);
  });
});
