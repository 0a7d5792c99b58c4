import { resolve } from 'node:path';
import type { SourceFile } from 'ts-morph';
import { type BuiltVersion, buildFile, type FileResult } from './build-file.ts';
import { type Bundler, createBundler } from './bundle.ts';
import { saveCodeCache } from './code-cache.ts';
import { findTsConfig, loadConfig } from './config.ts';
import { discoverDefinitionFiles, portablePath } from './discover.ts';
import { type Manifest, renderArtifacts, writeArtifacts } from './emit.ts';
import { type CompileDiagnostic, CompileError, CompileErrorCode } from './errors.ts';
import { type Instrumented, instrument } from './instrument.ts';
import { checkVersions, lockKey, readLock, writeLock } from './lock/lockfile.ts';
import { createTsProjects } from './project.ts';

export interface CompileOptions {
  /** Project directory: holds the config, and output paths are relative to it. */
  root: string;
  /** Artifact directory. (Default: the config's `out`, else `<root>/dist/flow`) */
  out?: string;
  /** Record versions not yet in the lock. (Default: false) */
  updateLock?: boolean;
  /** The version lock. (Default: the config's `lock`, else `<root>/flow.lock.json`) */
  lockPath?: string;
  /** Write artifacts to `out`; false only computes them. (Default: true) */
  write?: boolean;
}

export interface CompileResult {
  /** Every compiled LogicVersion, sorted by logicId then version. */
  readonly versions: readonly BuiltVersion[];
  readonly manifest: Manifest;
  /** Artifact contents by path relative to `outDir`. */
  readonly artifacts: ReadonlyMap<string, string | Uint8Array>;
  readonly outDir: string;
  readonly lockPath: string;
  /** Artifacts whose content changed in this run. */
  readonly written: readonly string[];
  /** `logicId@version` not in the lock (recorded when `updateLock`). */
  readonly unlocked: readonly string[];
  readonly lockUpdated: boolean;
}

/** A long-lived compiler: `compile(changed)` recompiles only definitions that depend on `changed`. */
export interface CompilerSession {
  readonly files: readonly string[];
  compile(changed?: readonly string[]): Promise<CompileResult>;
  close(): Promise<void>;
}

export async function createCompiler(options: CompileOptions): Promise<CompilerSession> {
  const root = resolve(options.root);
  const config = await loadConfig(root);
  const outDir = resolve(root, options.out ?? config.out);
  const lockPath = resolve(root, options.lockPath ?? config.lock);
  const files = discoverDefinitionFiles(root, config.roots);
  if (files.length === 0) {
    throw new CompileError([
      { code: CompileErrorCode.noWorkflows, message: `no file under ${config.roots.join(', ')} imports sentin8-flow/sdk`, file: portablePath(process.cwd(), root) || '.' },
    ]);
  }
  const projects = createTsProjects(findTsConfig(root));
  const instrumented = new Map<string, Instrumented>();
  const ids = new Map(files.map((f, i) => [f, i]));
  const label = (path: string) => portablePath(root, path);
  const reinstrument = (f: string) => instrumented.set(f, instrument(projects.source(f), ids.get(f)!));
  files.forEach(reinstrument);
  const bundler: Bundler = createBundler((p) => instrumented.get(p)?.text, root);
  const results = new Map<string, FileResult>();
  const deps = new Map<string, string[]>();
  const mappingSource = {
    node(tag: string) {
      const [file, index] = tag.split('#');
      const path = files[Number(file)];
      return path === undefined ? undefined : instrumented.get(path)?.nodes[Number(index)];
    },
    label: (node: { getSourceFile(): SourceFile }) => label(node.getSourceFile().getFilePath()),
  };

  async function compile(changed?: readonly string[]): Promise<CompileResult> {
    let dirty = files;
    if (changed !== undefined) {
      const set = new Set(changed.map((c) => resolve(c)));
      projects.refresh(set);
      for (const f of files) if (set.has(f)) reinstrument(f);
      dirty = files.filter((f) => set.has(f) || (deps.get(f) ?? []).some((d) => set.has(d)));
    }
    // esbuild works in its own process: bundle while the type checker runs here.
    const bundling = bundler.build(dirty).then(
      (value) => ({ ok: true as const, value }),
      (error: unknown) => ({ ok: false as const, error }),
    );
    const checked = projects.check(dirty, (sf) => label(sf.getFilePath()));
    // Mappings are translated from the syntax nodes of the project that type-checked them.
    if (checked.switched) files.forEach(reinstrument);
    const typeErrors = checked.diagnostics;
    const bundled = await bundling;
    if (!bundled.ok) throw bundled.error;
    const bundles = bundled.value;
    for (const f of dirty) {
      const bundle = bundles.get(f);
      if (bundle !== undefined) deps.set(f, bundle.inputs);
      const mine = typeErrors.filter((d) => d.file === label(f));
      if (mine.length > 0 || bundle === undefined) {
        results.set(f, { versions: [], modules: new Map(), diagnostics: mine });
        continue;
      }
      results.set(f, await buildFile(f, label(f), bundle.code, mappingSource));
    }
    // now, while the bytecode this compile needed is all there (a no-op once written)
    saveCodeCache();
    return finish();
  }

  async function finish(): Promise<CompileResult> {
    const all = files.map((f) => results.get(f)!).filter(Boolean);
    const diagnostics: CompileDiagnostic[] = all.flatMap((r) => r.diagnostics);
    const versions = all.flatMap((r) => r.versions);
    const modules = new Map(all.flatMap((r) => [...r.modules]));
    const seen = new Map<string, string>();
    for (const v of versions) {
      const key = lockKey(v.doc);
      const other = seen.get(key);
      if (other !== undefined) {
        diagnostics.push({ code: CompileErrorCode.duplicateVersion, message: `${key} is defined twice (also in ${other})`, file: v.source });
      }
      seen.set(key, v.source);
    }
    if (versions.length === 0 && diagnostics.length === 0) {
      diagnostics.push({ code: CompileErrorCode.noWorkflows, message: 'no exported workflow definitions found' });
    }
    if (diagnostics.length > 0) throw new CompileError(diagnostics);
    const gate = checkVersions(readLock(lockPath), versions.map((v) => ({ doc: v.doc, file: v.source })), label(lockPath));
    if (gate.diagnostics.length > 0) throw new CompileError(gate.diagnostics);
    const lockUpdated = options.updateLock === true && gate.unlocked.length > 0 ? writeLock(lockPath, gate.updated) : false;
    const { files: artifacts, manifest } = renderArtifacts(versions, modules);
    const written = options.write === false ? [] : writeArtifacts(outDir, artifacts);
    const sorted = manifest.logicVersions.map((m) => versions.find((v) => v.doc.logicId === m.logicId && v.doc.version === m.version)!);
    return { versions: sorted, manifest, artifacts, outDir, lockPath, written, unlocked: lockUpdated ? [] : gate.unlocked, lockUpdated };
  }

  return { files, compile, close: () => bundler.dispose() };
}

/** Compiles every workflow definition under `root` once. */
export async function compile(options: CompileOptions): Promise<CompileResult> {
  const session = await createCompiler(options);
  try {
    return await session.compile();
  } finally {
    await session.close();
  }
}
