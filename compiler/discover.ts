import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';

const SKIP_DIRS = new Set(['node_modules', 'dist', '.flow', '.git', 'coverage']);
const IMPORT_RE = /(?:from|import)\s*\(?\s*['"]([^'"]+)['"]/g;

/** True when `specifier` names the SDK: the package export or a path to the sdk folder. */
export function isSdkSpecifier(specifier: string): boolean {
  return specifier === 'sentin8-flow/sdk' || /(^|\/)sdk(\/index(\.ts)?)?$/.test(specifier);
}

/**
 * TypeScript files under `roots` that import the SDK: the candidates for workflow definitions.
 * Sorted, so discovery order never depends on the file system.
 */
export function discoverDefinitionFiles(root: string, roots: readonly string[]): string[] {
  const files = new Set<string>();
  for (const r of roots) walk(resolve(root, r), files);
  return [...files].filter((f) => importsSdk(readFileSync(f, 'utf8'))).sort();
}

export function importsSdk(text: string): boolean {
  for (const m of text.matchAll(IMPORT_RE)) if (isSdkSpecifier(m[1] ?? '')) return true;
  return false;
}

function walk(dir: string, out: Set<string>): void {
  let entries: import('node:fs').Dirent[];
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return;
  }
  for (const e of entries) {
    if (e.name.startsWith('.') || SKIP_DIRS.has(e.name)) continue;
    const full = join(dir, e.name);
    if (e.isDirectory()) walk(full, out);
    else if (e.isFile() && e.name.endsWith('.ts') && !/\.(d|test|spec|bench|as)\.ts$/.test(e.name)) out.add(full);
  }
}

/** A path relative to `root` with `/` separators: the same on every machine. */
export function portablePath(root: string, file: string): string {
  return relative(root, file).split(sep).join('/');
}
