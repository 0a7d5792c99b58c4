import type { LogicVersion } from '../../contracts/index.ts';
import type { Db } from '../store/db.ts';
import { findLogicVersionByHash } from '../store/logic-versions.ts';
import { type Client, inEnv } from '../store/tx.ts';

/** Published versions never change, so each is read from the store once per process (by hash). */
export class LogicCache {
  readonly #byHash = new Map<string, LogicVersion>();
  constructor(private readonly db: Db) {}

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
