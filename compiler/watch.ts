import { existsSync, readFileSync } from 'node:fs';
import { relative, resolve } from 'node:path';
import { importsSdk } from './discover.ts';
import { CompileError } from './errors.ts';
import { type CompileOptions, type CompileResult, type CompilerSession, createCompiler } from './session.ts';
import { watchTree } from './watch-tree.ts';

const IGNORED = /(^|\/)(node_modules|dist|\.flow|\.git)(\/|$)/;

export interface WatchOptions extends CompileOptions {
  /** Called after every compile, successful or not. */
  onResult(result: { ok: true; value: CompileResult; changed: readonly string[] } | { ok: false; error: CompileError; changed: readonly string[] }): void;
  /** Quiet period before a burst of file events is compiled, in ms. (Default: 50) */
  debounceMs?: number;
}

/**
 * Compiles once, then recompiles the definitions affected by each change under `root`. A `.ts`
 * file that is new to the compiler restarts the session, so new definitions are discovered.
 * Returns a function that stops watching.
 */
export async function watch(options: WatchOptions): Promise<() => Promise<void>> {
  const root = resolve(options.root);
  let session: CompilerSession | null = null;
  let pending = new Set<string>();
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> = Promise.resolve();

  const run = async (changed: readonly string[]) => {
    try {
      if (session === null || changed.some((c) => needsRestart(session!, c))) {
        await session?.close();
        session = await createCompiler(options);
        options.onResult({ ok: true, value: await session.compile(), changed });
      } else {
        options.onResult({ ok: true, value: await session.compile(changed), changed });
      }
    } catch (err) {
      if (!(err instanceof CompileError)) throw err;
      options.onResult({ ok: false, error: err, changed });
    }
  };
  await run([]);
  const stopWatching = watchTree(root, (rel) => IGNORED.test(rel), (path) => {
    if (IGNORED.test(relative(root, path)) || !/\.(ts|json|wasm)$/.test(path)) return;
    pending.add(path);
    clearTimeout(timer);
    timer = setTimeout(() => {
      const changed = [...pending];
      pending = new Set();
      running = running.then(() => run(changed));
    }, options.debounceMs ?? 50);
  });
  return async () => {
    stopWatching();
    clearTimeout(timer);
    await running;
    await session?.close();
  };
}

/** A definition was deleted, or a new `.ts` file imports the SDK: discovery must run again. */
function needsRestart(session: CompilerSession, path: string): boolean {
  if (!path.endsWith('.ts')) return false;
  if (session.files.includes(path)) return !existsSync(path);
  return existsSync(path) && importsSdk(readFileSync(path, 'utf8'));
}
