import type { LogicVersion } from '../../contracts/index.ts';
import type { Db } from '../store/db.ts';
import { NotFound, VersionRetired } from '../store/errors.ts';
import { findStartableVersion } from '../store/find-startable-version.ts';
import { findLogicVersionByHash } from '../store/logic-versions.ts';
import { type Client, inEnv } from '../store/tx.ts';

/** Published versions never change, so each is read from the store once per process (by hash). */
export class LogicCache {
  readonly #byHash = new Map<string, LogicVersion>();
  /** The version a start of (env, logicId, version asked) last found; a start checks it still holds (migration 0046). */
  readonly #toStart = new Map<string, LogicVersion>();
  constructor(private readonly db: Db) {}

  /**
   * The version a start request names: `version`, else the highest active one. Remembered,
   * since the active version changes seldom; the start's insert checks it is still the one, and
   * `fresh` reads it again after it was not.
   */
  async toStart(env: string, logicId: string, version: number | undefined, fresh = false): Promise<LogicVersion> {
    const key = JSON.stringify([env, logicId, version ?? null]);
    const hit = fresh ? undefined : this.#toStart.get(key);
    if (hit !== undefined) return hit;
    this.#toStart.delete(key);
    const found = await inEnv(this.db, env, (c) => findStartableVersion(c, logicId, version));
    if (found === null) throw new NotFound(`LogicVersion ${logicId}${version ? `@${version}` : ''}`);
    if (!found.active) throw new VersionRetired(logicId, version);
    this.remember(found.doc);
    this.#toStart.set(key, found.doc);
    return found.doc;
  }

  remember(doc: LogicVersion): void {
    this.#byHash.set(doc.hash, doc);
  }

  /** Pass `client` when already inside a transaction: PGlite has one session, a second would wait forever. */
  async get(env: string, hash: string, client?: Client): Promise<LogicVersion> {
    const hit = this.#byHash.get(hash);
    if (hit !== undefined) return hit;
    const doc = client ? await findLogicVersionByHash(client, hash) : await inEnv(this.db, env, (c) => findLogicVersionByHash(c, hash));
    if (doc === null) throw new Error(`LogicVersion ${hash} is not published in env ${env}`);
    this.#byHash.set(hash, doc);
    return doc;
  }
}
