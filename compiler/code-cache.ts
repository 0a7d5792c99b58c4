import { mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import Module, { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Script } from 'node:vm';

/**
 * Runs `load` (synchronous: a `require`, or a bundle's evaluation) with V8's code cache for every
 * CommonJS file it loads. ts-morph brings 12 MB of JavaScript (typescript.js alone is 9 MB) and a
 * bundle's `require('zod')` ~100 files, which V8 would otherwise parse and compile again in every
 * `s8flow compile`. Node 22 does this itself (`module.enableCompileCache`); the compiler supports
 * Node 20, so it keeps its own cache: V8's cached data for each file, in the temporary directory,
 * keyed by path, size, mtime and the Node version. A file that had no data (or data V8 refused) gets
 * it at `saveCodeCache()`, which the compiler calls once its first compile is done, so the data
 * holds the bytecode of every function that compile needed (program creation and type checking),
 * not only the top-level code. V8 checks the data against the source and refuses a mismatch; the
 * file then compiles as it would have anyway.
 */
export function withCodeCache<T>(load: () => T): T {
  const extensions = (Module as unknown as { _extensions: Record<string, (m: Module, f: string) => void> })._extensions;
  const plainJs = extensions['.js']!;
  extensions['.js'] = (module, filename) => loadCached(module, filename, plainJs);
  try {
    return load();
  } finally {
    extensions['.js'] = plainJs;
  }
}

const CACHE_DIR = join(tmpdir(), `sentin8-flow-code-cache-${process.getuid?.() ?? 0}`);
const pending: { file: string; script: Script }[] = [];

function loadCached(module: Module, filename: string, plainJs: (m: Module, f: string) => void): void {
  const { size, mtimeMs } = statSync(filename);
  const cacheFile = join(CACHE_DIR, `${filename.replace(/[^A-Za-z0-9.-]/g, '_')}-${size}-${Math.round(mtimeMs)}-${process.version}.bin`);
  let cachedData: Buffer | undefined;
  try {
    cachedData = readFileSync(cacheFile);
  } catch {
    // no cache yet: compile, and write it at exit
  }
  let script: Script;
  try {
    script = new Script(Module.wrap(readFileSync(filename, 'utf8')), { filename, ...(cachedData && { cachedData }) });
  } catch {
    // not CommonJS (an ES module Node would load through require(esm)), or a syntax error Node reports
    plainJs(module, filename);
    return;
  }
  if (cachedData === undefined || script.cachedDataRejected === true) pending.push({ file: cacheFile, script });
  const wrapper = script.runInThisContext() as (...args: unknown[]) => void;
  wrapper.call(module.exports, module.exports, createRequire(filename), module, filename, dirname(filename));
}

/**
 * Writes the data of the files loaded without any since the last call. Not at exit: by then V8 may
 * have dropped the bytecode of functions that have not run for a while, and a file's data is
 * written only once. `npm run demo` (which runs the engine on PGlite after compiling) wrote 2.2 MB
 * for typescript.js and 0.07 MB for ts-morph at exit, against 3.8 and 5.6 MB right after the
 * compile, and every later cold compile was ~0.3 s slower for it; in a fresh clone, `npm test`'s
 * quick-start test (the demo) is what wrote them.
 */
export function saveCodeCache(): void {
  if (pending.length === 0) return;
  try {
    mkdirSync(CACHE_DIR, { recursive: true });
    for (const { file, script } of pending.splice(0)) {
      const tmp = `${file}.${process.pid}`;
      writeFileSync(tmp, script.createCachedData());
      renameSync(tmp, file);
    }
  } catch {
    // A cache that cannot be written costs the next run its speed, not its result.
  }
}
