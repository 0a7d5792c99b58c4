import { mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import Module, { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Script } from 'node:vm';

/**
 * `require(specifier)` with V8's code cache for the CommonJS files it loads: ts-morph brings 12 MB
 * of JavaScript (typescript.js alone is 9 MB) that V8 would otherwise parse and compile again in
 * every `s8flow compile`. Node 22 does this itself (`module.enableCompileCache`); the compiler
 * supports Node 20, so it keeps its own cache: one file of V8 cached data per script, in the
 * temporary directory, keyed by path, size, mtime and the Node version. The cache is written once,
 * when the process exits after a run that had none, so it holds the bytecode of every function
 * that run compiled lazily (program creation and type checking), not only the top-level code.
 * V8 checks the data against the source and refuses a mismatch; the file then compiles as usual.
 */
export function requireWithCodeCache(specifier: string, from: string): unknown {
  const dir = join(tmpdir(), `sentin8-flow-code-cache-${process.getuid?.() ?? 0}`);
  const pending: { file: string; script: Script }[] = [];
  const extensions = (Module as unknown as { _extensions: Record<string, (m: Module, f: string) => void> })._extensions;
  const plainJs = extensions['.js']!;
  extensions['.js'] = (module, filename) => {
    const { size, mtimeMs } = statSync(filename);
    if (size < 1_000_000) return plainJs(module, filename);
    const cacheFile = join(dir, `${filename.replace(/[^A-Za-z0-9.-]/g, '_')}-${size}-${Math.round(mtimeMs)}-${process.version}.bin`);
    let cachedData: Buffer | undefined;
    try {
      cachedData = readFileSync(cacheFile);
    } catch {}
    const script = new Script(Module.wrap(readFileSync(filename, 'utf8')), { filename, ...(cachedData && { cachedData }) });
    if (cachedData === undefined || script.cachedDataRejected === true) pending.push({ file: cacheFile, script });
    const wrapper = script.runInThisContext() as (...args: unknown[]) => void;
    const require = createRequire(filename);
    wrapper.call(module.exports, module.exports, require, module, filename, dirname(filename));
  };
  try {
    return createRequire(from)(specifier);
  } finally {
    extensions['.js'] = plainJs;
    if (pending.length > 0) process.once('exit', () => writeCaches(dir, pending));
  }
}

function writeCaches(dir: string, pending: { file: string; script: Script }[]): void {
  try {
    mkdirSync(dir, { recursive: true });
    for (const { file, script } of pending) {
      const tmp = `${file}.${process.pid}`;
      writeFileSync(tmp, script.createCachedData());
      renameSync(tmp, file);
    }
  } catch {
    // A cache that cannot be written costs the next run its speed, not its result.
  }
}
