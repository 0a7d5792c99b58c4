import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import type { LogicVersion } from '../../contracts/logic-version.ts';
import { type CompileDiagnostic, CompileError, CompileErrorCode } from '../errors.ts';
import { classifyChange } from './classify.ts';
import { type LockShape, shapeOf } from './shape.ts';

/** flow.lock.json: every published (logicId, version) with its hash and the shape the gate compares. */
export interface Lockfile {
  lockfileVersion: 1;
  versions: Record<string, { hash: string; shape: LockShape }>;
}

export const lockKey = (doc: Pick<LogicVersion, 'logicId' | 'version'>) => `${doc.logicId}@${doc.version}`;

export function readLock(path: string): Lockfile {
  if (!existsSync(path)) return { lockfileVersion: 1, versions: {} };
  try {
    const parsed = JSON.parse(readFileSync(path, 'utf8')) as Lockfile;
    if (parsed.lockfileVersion !== 1 || typeof parsed.versions !== 'object') throw new Error('unknown lockfileVersion');
    return parsed;
  } catch (err) {
    throw new CompileError([{ code: CompileErrorCode.lockInvalid, message: `${path}: ${(err as Error).message}`, file: path }]);
  }
}

/** Sorted keys and two-space indent: a lockfile authors commit should diff well. */
export function serializeLock(lock: Lockfile): string {
  return `${JSON.stringify(sortKeys(lock), null, 2)}\n`;
}

export function writeLock(path: string, lock: Lockfile): boolean {
  const text = serializeLock(lock);
  if (existsSync(path) && readFileSync(path, 'utf8') === text) return false;
  writeFileSync(path, text);
  return true;
}

export interface GateResult {
  /** A version changed under a locked (logicId, version): each with its classification. */
  readonly diagnostics: CompileDiagnostic[];
  /** Versions not in the lock yet. */
  readonly unlocked: string[];
  /** The lock with every unlocked version added (what `--update-lock` writes). */
  readonly updated: Lockfile;
}

/**
 * The version gate: a LogicVersion whose (logicId, version) is locked must hash the same. A change
 * fails with the diff, classified safe or breaking, and what to do about it.
 */
export function checkVersions(lock: Lockfile, docs: readonly { doc: LogicVersion; file: string }[], lockLabel: string): GateResult {
  const diagnostics: CompileDiagnostic[] = [];
  const unlocked: string[] = [];
  const versions = { ...lock.versions };
  for (const { doc, file } of docs) {
    const key = lockKey(doc);
    const entry = lock.versions[key];
    if (entry === undefined) {
      unlocked.push(key);
      versions[key] = { hash: doc.hash, shape: shapeOf(doc) };
      continue;
    }
    if (entry.hash === doc.hash) continue;
    const { kind, reasons } = classifyChange(entry.shape, shapeOf(doc));
    const list = reasons.map((r) => `    ${r.breaking ? 'breaking' : 'safe'}: ${r.text}`).join('\n');
    const advice =
      kind === 'safe'
        ? `bump to version ${doc.version + 1} and run \`s8flow compile --update-lock\`; instances on @${doc.version} can keep running on it`
        : `bump to version ${doc.version + 1} and run \`s8flow compile --update-lock\`; let instances on @${doc.version} drain before decommissioning it`;
    diagnostics.push({
      code: kind === 'safe' ? CompileErrorCode.versionChangedSafe : CompileErrorCode.versionChangedBreaking,
      message:
        `${key} changed but is locked in ${lockLabel} (${entry.hash} → ${doc.hash}). ` +
        `The change is ${kind.toUpperCase()}:\n${list}`,
      file,
      hint: advice,
    });
  }
  return { diagnostics, unlocked, updated: { lockfileVersion: 1, versions } };
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.keys(value)
      .sort()
      .map((k) => [k, sortKeys((value as Record<string, unknown>)[k])]),
  );
}
