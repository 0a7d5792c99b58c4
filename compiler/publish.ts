import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { canonicalJson, sha256Hex } from '../contracts/canonical-json.ts';
import { LogicVersionInvalid } from '../contracts/errors.ts';
import { parseLogicVersion } from '../contracts/validate.ts';
import { type Manifest, MANIFEST_SCHEMA } from './emit.ts';
import { PublishError, PublishErrorCode } from './errors.ts';
import { COMPILER_VERSION } from './version.ts';

export interface PublishOptions {
  /** A compiled artifact directory (holds manifest.json). */
  from: string;
  /** An engine's artifact directory. HTTP targets are not supported yet. */
  to: string;
}

export interface PublishResult {
  readonly target: string;
  /** `logicId@version` copied now. */
  readonly published: readonly string[];
  /** Already there with the same hash. */
  readonly unchanged: readonly string[];
  readonly modules: readonly string[];
}

/**
 * Copies compiled artifacts into an engine's artifact directory. Idempotent by hash: a version that
 * is already there with the same hash is skipped; one with another hash is refused
 * (PUBLISH_VERSION_CONFLICT) and nothing is copied. Every artifact is verified before anything is written.
 */
export async function publish(options: PublishOptions): Promise<PublishResult> {
  if (/^[a-z]+:\/\//i.test(options.to)) {
    throw new PublishError(PublishErrorCode.targetUnsupported, `the compiler publishes to a directory, not ${options.to}; s8flow publish --to http(s)://… uploads through the engine API`);
  }
  const [from, to] = [resolve(options.from), resolve(options.to)];
  const manifest = readManifest(join(from, 'manifest.json'), true)!;
  const versions = manifest.logicVersions.map((entry) => {
    const text = readSource(from, entry.file);
    let doc: { hash: string };
    try {
      doc = parseLogicVersion(JSON.parse(text));
    } catch (err) {
      const why = err instanceof LogicVersionInvalid ? err.message : (err as Error).message;
      throw new PublishError(PublishErrorCode.sourceInvalid, `${entry.file} is not a valid LogicVersion: ${why}`);
    }
    if (doc.hash !== entry.hash) throw new PublishError(PublishErrorCode.sourceInvalid, `${entry.file} hash differs from manifest.json; recompile`);
    return { entry, text, key: `${entry.logicId}@${entry.version}` };
  });
  const modules = manifest.modules.map((m) => {
    const bytes = readFileSync(join(from, m.file));
    if (sha256Hex(bytes) !== m.sha256) throw new PublishError(PublishErrorCode.sourceInvalid, `${m.file} does not match its sha256; recompile`);
    return { m, bytes };
  });

  const conflicts: string[] = [];
  const unchanged: string[] = [];
  const toCopy = versions.filter(({ entry, key }) => {
    const existing = join(to, entry.file);
    if (!existsSync(existing)) return true;
    const hash = (JSON.parse(readFileSync(existing, 'utf8')) as { hash?: string }).hash;
    if (hash === entry.hash) unchanged.push(key);
    else conflicts.push(`${key}: published ${hash}, compiled ${entry.hash}`);
    return false;
  });
  if (conflicts.length > 0) {
    throw new PublishError(
      PublishErrorCode.versionConflict,
      `refusing to replace published versions with different content (bump the version):\n  ${conflicts.join('\n  ')}`,
      conflicts,
    );
  }
  for (const { m } of modules) {
    const existing = join(to, m.file);
    if (existsSync(existing) && sha256Hex(readFileSync(existing)) !== m.sha256) {
      throw new PublishError(PublishErrorCode.moduleMismatch, `${existing} exists with other content than its name says`);
    }
  }

  const copiedModules: string[] = [];
  for (const { m, bytes } of modules) {
    if (existsSync(join(to, m.file))) continue;
    atomicWrite(join(to, m.file), bytes);
    copiedModules.push(m.sha256);
  }
  for (const { entry, text } of toCopy) {
    atomicWrite(join(to, entry.file), text);
    if (existsSync(join(from, entry.diagram))) atomicWrite(join(to, entry.diagram), readFileSync(join(from, entry.diagram)));
  }
  atomicWrite(join(to, 'manifest.json'), canonicalJson(mergeManifests(readManifest(join(to, 'manifest.json'), false), manifest)));
  return { target: to, published: toCopy.map((v) => v.key), unchanged, modules: copiedModules };
}

function readManifest(path: string, required: boolean): Manifest | null {
  if (!existsSync(path)) {
    if (!required) return null;
    throw new PublishError(PublishErrorCode.sourceInvalid, `${path} not found; run s8flow compile first`);
  }
  const m = JSON.parse(readFileSync(path, 'utf8')) as Manifest;
  if (m.schema !== MANIFEST_SCHEMA || !Array.isArray(m.logicVersions) || !Array.isArray(m.modules)) {
    throw new PublishError(PublishErrorCode.sourceInvalid, `${path} is not a ${MANIFEST_SCHEMA} manifest`);
  }
  return m;
}

function readSource(dir: string, file: string): string {
  const path = join(dir, file);
  if (!existsSync(path)) throw new PublishError(PublishErrorCode.sourceInvalid, `${path} is listed in manifest.json but missing`);
  return readFileSync(path, 'utf8');
}

function mergeManifests(existing: Manifest | null, incoming: Manifest): Manifest {
  const versions = new Map([...(existing?.logicVersions ?? []), ...incoming.logicVersions].map((v) => [`${v.logicId}@${v.version}`, v]));
  const modules = new Map([...(existing?.modules ?? []), ...incoming.modules].map((m) => [m.sha256, m]));
  return {
    schema: MANIFEST_SCHEMA,
    compiler: COMPILER_VERSION,
    logicVersions: [...versions.values()].sort((a, b) => (a.logicId < b.logicId ? -1 : a.logicId > b.logicId ? 1 : a.version - b.version)),
    modules: [...modules.values()].sort((a, b) => (a.sha256 < b.sha256 ? -1 : 1)),
  };
}

/** Write to a temporary name, then rename: an engine reading the directory never sees half a file. */
function atomicWrite(path: string, content: string | Uint8Array): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, content);
  renameSync(tmp, path);
}
