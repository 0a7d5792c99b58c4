import { readdir, readFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { FlowError, type LogicVersion, parseLogicVersion } from '../../contracts/index.ts';
import { ArtifactInvalid } from '../errors.ts';

/**
 * Reads every `<logicId>@<version>.json` of an artifact directory (DESIGN.md §3) and validates it,
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
