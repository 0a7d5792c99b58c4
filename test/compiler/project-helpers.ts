import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CompileError, type CompileDiagnostic } from '../../compiler/errors.ts';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));
export const EXAMPLES = join(REPO, 'examples/workflows');

/**
 * A scratch project inside the repository (under .tmp/, git-ignored), so its files resolve
 * `sentin8-flow/sdk` and zod exactly as an author's would. Remove it with `dispose()`.
 */
export function scratchProject(files: Record<string, string | Uint8Array>): { dir: string; write(path: string, text: string): string; dispose(): void } {
  mkdirSync(join(REPO, '.tmp'), { recursive: true });
  const dir = mkdtempSync(join(REPO, '.tmp', 'compiler-test-'));
  const write = (path: string, text: string | Uint8Array) => {
    const full = join(dir, path);
    mkdirSync(dirname(full), { recursive: true });
    writeFileSync(full, text);
    return full;
  };
  for (const [path, text] of Object.entries(files)) write(path, text);
  // An installed SDK, as in an author's project (a package.json of its own ends self-reference).
  mkdirSync(join(dir, 'node_modules'), { recursive: true });
  symlinkSync(REPO, join(dir, 'node_modules', 'sentin8-flow'), 'dir');
  return { dir, write, dispose: () => rmSync(dir, { recursive: true, force: true, maxRetries: 5 }) };
}

/** Every file under `dir` by relative path. */
export function readTree(dir: string): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  const walk = (d: string) => {
    for (const name of readdirSync(d).sort()) {
      const full = join(d, name);
      if (statSync(full).isDirectory()) walk(full);
      else out.set(relative(dir, full), readFileSync(full));
    }
  };
  walk(dir);
  return out;
}

/** The diagnostics a failing compile reports. */
export async function diagnosticsOf(run: Promise<unknown>): Promise<readonly CompileDiagnostic[]> {
  try {
    await run;
  } catch (err) {
    if (err instanceof CompileError) return err.diagnostics;
    throw err;
  }
  throw new Error('expected the compile to fail');
}

/** A minimal workflow file importing the SDK like an author would. */
export function flowSource(body: string): string {
  return `import { workflow } from 'sentin8-flow/sdk';\nimport { z } from 'zod';\n\n${body}\n`;
}
