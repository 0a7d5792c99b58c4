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
 * keyed by path, size, mtime and the Node version. A file's data is written when the process exits
 * after a run that had none, so it holds the bytecode of every function that run compiled lazily
 * (program creation and type checking), not only the top-level code. V8 checks the data against
 * the source and refuses a mismatch; the file then compiles as it would have anyway.
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
  if (cachedData === undefined || script.cachedDataRejected === true) {
    if (pending.length === 0) process.once('exit', writePending);
    pending.push({ file: cacheFile, script });
  }
  const wrapper = script.runInThisContext() as (...args: unknown[]) => void;
  wrapper.call(module.exports, module.exports, createRequire(filename), module, filename, dirname(filename));
}

function writePending(): void {
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
