// Plain JavaScript: this runs before anything can load TypeScript.
import { readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** How long before a build a source's mtime counts as racing it (see freshBundle). */
const RACY_MS = 2000;

/**
 * The path of an ES module bundle of `entry` (a TypeScript file under `root`) that is built from
 * the sources as they are now. The CLI runs from such a bundle rather than through tsx's loader,
 * whose hooks every module and every CommonJS file (ts-morph's 13 MB among them) pass through: a
 * cold `s8flow compile` spent ~0.35 s in them (docs/performance.md, "The compiler").
 *
 * esbuild builds it on first use into `cacheDir`, and again once any source it was built from
 * (or this file) has changed size or mtime, so a bundle never runs code older than its sources.
 * Packages stay external (Node loads them as usual), dynamic imports become chunks loaded on
 * demand, and each source keeps its own `import.meta.url`, so paths it resolves beside itself are
 * unchanged. Throws when the bundle cannot be built or written; the caller then runs the sources
 * through tsx.
 */
export async function freshBundle({ root, entry, cacheDir }) {
  const pointerFile = join(cacheDir, 'current.json');
  const current = readPointer(pointerFile);
  // the Node version and this file's rules made the bundle too
  const self = statSync(fileURLToPath(import.meta.url));
  const stamp = `${process.version} ${self.size} ${self.mtimeMs}`;
  if (current?.stamp === stamp && unchanged(root, current.inputs)) {
    return join(cacheDir, current.dir, 'main.js');
  }
  const esbuild = await import('esbuild');
  const startedMs = Date.now();
  const dir = `b-${startedMs}-${process.pid}`;
  const result = await esbuild.build({
    entryPoints: { main: entry },
    absWorkingDir: root,
    outdir: join(cacheDir, dir),
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    packages: 'external',
    metafile: true,
    logLevel: 'silent',
    plugins: [ownImportMetaUrl],
  });
  const inputs = Object.keys(result.metafile.inputs).map((file) => {
    const { size, mtimeMs } = statSync(join(root, file));
    return [file, size, mtimeMs];
  });
  // A source edited while esbuild read it may be in the bundle in either version: use the bundle
  // this once, but do not point later runs at it. File times come from the kernel's coarse clock
  // and Date.now() is whole milliseconds, so "while" takes in the two seconds before the build.
  if (inputs.every(([, , mtimeMs]) => mtimeMs < startedMs - RACY_MS)) {
    const tmp = `${pointerFile}.${process.pid}`;
    writeFileSync(tmp, JSON.stringify({ stamp, dir, inputs }));
    renameSync(tmp, pointerFile);
    // the bundle replaced is dated now: processes started from it may still load its chunks
    if (current?.dir) {
      try {
        utimesSync(join(cacheDir, current.dir), new Date(), new Date());
      } catch {
        // removed already
      }
    }
    pruneOld(cacheDir, dir);
  }
  return join(cacheDir, dir, 'main.js');
}

/**
 * Where the bundles of the package at `root` live: under its own node_modules, so that the
 * packages a bundle leaves external resolve from it as they do from the sources.
 */
export function cacheDirFor(root) {
  return join(root, 'node_modules', '.cache', 'sentin8-flow-cli');
}

function readPointer(file) {
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch {
    return null;
  }
}

function unchanged(root, inputs) {
  for (const [file, size, mtimeMs] of inputs) {
    let st;
    try {
      st = statSync(join(root, file));
    } catch {
      return false;
    }
    if (st.size !== size || st.mtimeMs !== mtimeMs) return false;
  }
  return true;
}

/**
 * Removes bundles replaced more than a day ago (a bundle's directory is dated when it is
 * replaced). A process started from one may still load its chunks on demand, so a bundle just
 * replaced stays.
 */
function pruneOld(cacheDir, keep) {
  const dayAgo = Date.now() - 24 * 3600_000;
  for (const name of readdirSync(cacheDir)) {
    if (!name.startsWith('b-') || name === keep) continue;
    const path = join(cacheDir, name);
    if (statSync(path).mtimeMs < dayAgo) rmSync(path, { recursive: true, force: true });
  }
}

/** Each source file's `import.meta.url` stays its own, not the bundle chunk's. */
const ownImportMetaUrl = {
  name: 'own-import-meta-url',
  setup(build) {
    // packages are external, so only the package's own sources come through here
    build.onLoad({ filter: /\.[cm]?[jt]sx?$/ }, (args) => {
      const text = readFileSync(args.path, 'utf8');
      if (!text.includes('import.meta.url')) return undefined;
      const loader = /\.[cm]?([jt]sx?)$/.exec(args.path)[1];
      return { contents: text.replaceAll('import.meta.url', JSON.stringify(pathToFileURL(args.path).href)), loader };
    });
  },
};
