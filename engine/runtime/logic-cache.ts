import type { LogicVersion } from '../../contracts/index.ts';
import type { Db } from '../store/db.ts';
import { NotFound, VersionRetired } from '../store/errors.ts';
import { findStartableVersion } from '../store/find-startable-version.ts';
import { findLogicVersionByHash } from '../store/logic-versions.ts';
import { type Client, inEnv } from '../store/tx.ts';

/** Published versions never change, so each is read from the store once per process (by hash). */
export class LogicCache {
  readonly #byHash = new Map<string, LogicVersion>();
  /**
   * The version a start of (env, logicId, version asked) last found; a start checks it still holds
   * (migration 0046). A lookup in flight is here too: starts that arrive together, as on a node
   * just booted into a burst, share it rather than each send one.
   */
  readonly #toStart = new Map<string, Promise<LogicVersion>>();
  constructor(private readonly db: Db) {}

  /**
   * The version a start request names: `version`, else the highest active one. Remembered,
   * since the active version changes seldom; the start's insert checks it is still the one, and
   * `fresh` reads it again after it was not. A lookup that fails is not remembered.
   */
  toStart(env: string, logicId: string, version: number | undefined, fresh = false): Promise<LogicVersion> {
    const key = JSON.stringify([env, logicId, version ?? null]);
    const hit = fresh ? undefined : this.#toStart.get(key);
    if (hit !== undefined) return hit;
    const found = this.#findToStart(env, logicId, version);
    this.#toStart.set(key, found);
    found.catch(() => {
      if (this.#toStart.get(key) === found) this.#toStart.delete(key);
    });
    return found;
  }

  async #findToStart(env: string, logicId: string, version: number | undefined): Promise<LogicVersion> {
    const found = await inEnv(this.db, env, (c) => findStartableVersion(c, logicId, version));
    if (found === null) throw new NotFound(`LogicVersion ${logicId}${version ? `@${version}` : ''}`);
    if (!found.active) throw new VersionRetired(logicId, version);
    this.remember(found.doc);
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
