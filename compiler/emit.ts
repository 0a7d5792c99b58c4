import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { canonicalJson } from '../contracts/canonical-json.ts';
import type { LogicVersion } from '../contracts/logic-version.ts';
import type { BuiltVersion } from './build-file.ts';
import { mermaidDiagram } from '../contracts/mermaid.ts';
import { memoByObject } from './memo.ts';
import { COMPILER_VERSION } from './version.ts';

export const MANIFEST_SCHEMA = 'sentin8.flow/manifest/v1';

/** manifest.json: every LogicVersion and module in the artifact directory, with its hash. */
export interface Manifest {
  schema: typeof MANIFEST_SCHEMA;
  compiler: string;
  logicVersions: { logicId: string; version: number; hash: string; file: string; diagram: string }[];
  modules: { sha256: string; file: string; bytes: number }[];
}

export const artifactName = (v: { logicId: string; version: number }) => `${v.logicId}@${v.version}`;

/**
 * Every artifact by path relative to the artifact directory. Content depends only on the
 * definitions: canonical JSON, sorted lists, no timestamps or absolute paths.
 */
export function renderArtifacts(versions: readonly BuiltVersion[], modules: ReadonlyMap<string, Uint8Array>) {
  const files = new Map<string, string | Uint8Array>();
  const sorted = [...versions].sort((a, b) => (a.doc.logicId < b.doc.logicId ? -1 : a.doc.logicId > b.doc.logicId ? 1 : a.doc.version - b.doc.version));
  for (const v of sorted) {
    const { json, diagram } = rendered(v.doc);
    files.set(`${artifactName(v.doc)}.json`, json);
    files.set(`${artifactName(v.doc)}.mmd`, diagram);
  }
  const shas = [...modules.keys()].sort();
  for (const sha of shas) files.set(`modules/${sha}.wasm`, modules.get(sha)!);
  const manifest: Manifest = {
    schema: MANIFEST_SCHEMA,
    compiler: COMPILER_VERSION,
    logicVersions: sorted.map((v) => ({
      logicId: v.doc.logicId,
      version: v.doc.version,
      hash: v.doc.hash,
      file: `${artifactName(v.doc)}.json`,
      diagram: `${artifactName(v.doc)}.mmd`,
    })),
    modules: shas.map((sha) => ({ sha256: sha, file: `modules/${sha}.wasm`, bytes: modules.get(sha)!.length })),
  };
  files.set('manifest.json', canonicalJson(manifest));
  return { files, manifest };
}

const rendered = memoByObject((doc: LogicVersion) => ({ json: canonicalJson(doc), diagram: mermaidDiagram(doc) }));

const OWNED = /^([a-z][a-z0-9_.-]*@\d+\.(json|mmd)|manifest\.json)$/;

/**
 * Writes artifacts whose content changed and removes stale ones this compiler owns
 * (`<logicId>@<v>.json|.mmd`, unreferenced `modules/*.wasm`). Returns the paths written.
 */
export function writeArtifacts(outDir: string, files: ReadonlyMap<string, string | Uint8Array>): string[] {
  mkdirSync(join(outDir, 'modules'), { recursive: true });
  const written: string[] = [];
  for (const [rel, content] of files) {
    const path = join(outDir, rel);
    const bytes = typeof content === 'string' ? Buffer.from(content) : Buffer.from(content);
    if (existsSync(path) && readFileSync(path).equals(bytes)) continue;
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, bytes);
    written.push(rel);
  }
  for (const name of readdirSync(outDir)) if (OWNED.test(name) && !files.has(name)) rmSync(join(outDir, name));
  for (const name of readdirSync(join(outDir, 'modules'))) {
    if (/^[0-9a-f]{64}\.wasm$/.test(name) && !files.has(`modules/${name}`)) rmSync(join(outDir, 'modules', name));
  }
  return written.sort();
}
