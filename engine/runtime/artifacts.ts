import { readdir, readFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { FlowError, type LogicVersion, parseLogicVersion } from '../../contracts/index.ts';
import { ArtifactInvalid } from '../errors.ts';
import { readArtifactModule } from './module-store.ts';

/**
 * Reads every `<logicId>@<version>.json` of an artifact directory (ARCHITECTURE.md, Contracts: artifact directory) and validates it,
 * hash included. The file name must agree with the document inside.
 */
export async function readArtifactDir(dir: string): Promise<LogicVersion[]> {
  const names = (await readdir(dir)).filter((f) => f.endsWith('.json') && f !== 'manifest.json').sort();
  return Promise.all(names.map((name) => readLogicFile(join(dir, name))));
}

export async function readLogicFile(file: string): Promise<LogicVersion> {
  let raw: unknown;
  try {
    raw = JSON.parse(await readFile(file, 'utf8'));
  } catch (err) {
    throw new ArtifactInvalid(file, `cannot read it as JSON (${(err as Error).message})`);
  }
  let doc: LogicVersion;
  try {
    doc = parseLogicVersion(raw);
  } catch (err) {
    if (err instanceof FlowError) throw new ArtifactInvalid(file, err.message);
    throw err;
  }
  const expected = `${doc.logicId}@${doc.version}.json`;
  if (basename(file) !== expected && basename(file).includes('@')) {
    throw new ArtifactInvalid(file, `holds ${doc.logicId}@${doc.version}; name it ${expected}`);
  }
  return doc;
}

/** Orders versions so that every workflow comes after the ones its `children` steps start. */
export function publishOrder(docs: readonly LogicVersion[]): LogicVersion[] {
  const ordered: LogicVersion[] = [];
  const placed = new Set<LogicVersion>();
  const visit = (doc: LogicVersion, path: Set<LogicVersion>) => {
    if (placed.has(doc) || path.has(doc)) return;
    path.add(doc);
    for (const step of Object.values(doc.steps)) {
      if (step.kind !== 'children') continue;
      for (const dep of docs) if (dep.logicId === step.logicId && (step.version === undefined || dep.version === step.version)) visit(dep, path);
    }
    placed.add(doc);
    ordered.push(doc);
  };
  for (const doc of docs) visit(doc, new Set());
  return ordered;
}

/** The binaries a version's modules name, read from the artifact directory's `modules/`. */
export async function artifactModules(dir: string, doc: LogicVersion): Promise<Record<string, Uint8Array>> {
  const modules: Record<string, Uint8Array> = {};
  for (const m of Object.values(doc.modules ?? {})) modules[m.sha256] = await readArtifactModule(dir, m.sha256);
  return modules;
}
