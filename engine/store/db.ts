import { PGlite } from '@electric-sql/pglite';
import { createPgConfig } from '@electric-sql/pglite/node-postgres';
import pg from 'pg';
import { BadSchemaName, PoolerSearchPath } from './errors.ts';

/** One handle on the store, whichever driver is underneath: the SQL is the same on both. */
export interface Db {
  readonly pool: pg.Pool;
  readonly schema: string;
  readonly driver: 'postgres' | 'pglite';
  /**
   * Subscribes to a NOTIFY channel; returns the unsubscribe function. `onNotify` gets the payload,
   * or '' after a reconnect, when anything may have changed meanwhile. On Postgres every channel
   * of the process shares one connection.
   */
  listen(channel: string, onNotify: (payload: string) => void): Promise<() => Promise<void>>;
  close(): Promise<void>;
}

export interface OpenDbOptions {
  /** Schema holding the tables. (Default: `flow`) */
  schema?: string;
  /** Connections in the pool; PGlite always uses 1 (one session). (Default: 10) */
  poolSize?: number;
  /**
   * A direct connection for LISTEN when `url` goes through a transaction-mode pooler
   * (`?pgbouncer=true`), where a LISTEN would land on whichever server connection the pooler
   * picks. Without it a pooled store has no NOTIFY: the workers find new work by their idle poll.
   * (Default: `url` itself when it is not pooled)
   */
  listenUrl?: string;
}

const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * Opens the store. `postgres://…` (or `postgresql://…`) opens a pg Pool; anything else is a PGlite
 * data directory, and no url at all is an in-memory PGlite. PGlite is one session, so its pool
 * stays at one connection: a second client would share that session's transaction.
 */
export async function openDb(url?: string, opts: OpenDbOptions = {}): Promise<Db> {
  const schema = opts.schema ?? 'flow';
  if (!SCHEMA_NAME.test(schema)) throw new BadSchemaName(schema);
  if (url !== undefined && /^postgres(ql)?:\/\//.test(url)) return openPostgres(url, schema, opts.poolSize ?? 10, opts.listenUrl);
  return openPglite(url, schema);
}

/**
 * A client whose statements are all unnamed. A transaction-mode pooler (PgBouncer 1.18) gives
 * each transaction whichever server connection is free, so a statement prepared under a name on
 * one is missing on the next; unnamed statements are parsed with every execution instead.
 */
class UnnamedStatementsClient extends pg.Client {
  // biome-ignore lint/suspicious/noExplicitAny: pg.Client#query has a dozen overloads; this passes every one through
  override query(config: any, ...rest: any[]): any {
    if (config !== null && typeof config === 'object' && 'name' in config) {
      const { name: _unnamed, ...statement } = config;
      return (super.query as (...args: unknown[]) => unknown)(statement, ...rest);
    }
    return (super.query as (...args: unknown[]) => unknown)(config, ...rest);
  }
}

/**
 * `?pgbouncer=true` on a postgres URL says a transaction-mode pooler is in between (the same
 * switch Prisma reads). Then statements go unnamed, no startup `options` are sent (PgBouncer
 * refuses or drops them), so the schema must come from the role's own search_path, and LISTEN
 * needs a direct connection of its own (`listenUrl`).
 */
function pooled(url: string): { url: string; pooled: boolean } {
  if (!/[?&]pgbouncer=/.test(url)) return { url, pooled: false };
  const parsed = new URL(url);
  const flag = parsed.searchParams.get('pgbouncer');
  parsed.searchParams.delete('pgbouncer');
  return { url: parsed.toString(), pooled: flag === 'true' || flag === '1' };
}

async function openPostgres(rawUrl: string, schema: string, max: number, listenUrl: string | undefined): Promise<Db> {
  const { url, pooled: viaPooler } = pooled(rawUrl);
  const pool = viaPooler
    ? new pg.Pool({ connectionString: url, max, Client: UnnamedStatementsClient })
    : new pg.Pool({ connectionString: url, max, options: `-c search_path=${schema}` });
  // An idle client that loses its connection (server restart) emits here; without a listener
  // the process would crash. The pool drops the client and opens a new one on next use.
  pool.on('error', () => {});
  // A client checked out when its connection drops emits 'error' as well, and the pool listens
  // only to idle ones: unheard, that error crashed the process. The query in flight rejects with
  // it anyway, and the pool discards the broken client when it is released.
  pool.on('connect', (client) => client.on('error', () => {}));
  if (viaPooler) await checkSearchPath(pool, schema);
  const listenTo = listenUrl ?? (viaPooler ? undefined : url);
  const listener = listenTo === undefined ? null : new Listener(listenTo);
  return {
    pool,
    schema,
    driver: 'postgres',
    listen: (channel, onNotify) => (listener === null ? Promise.resolve(async () => {}) : listener.listen(channel, onNotify)),
    close: async () => {
      await listener?.close();
      await pool.end();
    },
  };
}

/** Behind a pooler the schema comes from the role (ALTER ROLE … SET search_path): check it does. */
async function checkSearchPath(pool: pg.Pool, schema: string): Promise<void> {
  const { rows } = await pool.query<{ path: string }>(`SELECT current_setting('search_path') AS path`).catch(async (err) => {
    await pool.end();
    throw err;
  });
  const first = (rows[0]?.path ?? '').split(',')[0]!.trim().replace(/^"(.*)"$/, '$1');
  if (first !== schema) {
    await pool.end();
    throw new PoolerSearchPath(schema, rows[0]?.path ?? '');
  }
}

type OnNotify = (payload: string) => void;

/**
 * The process's one LISTEN connection, whatever channels it listens on. Postgres wakes every
 * listening connection of the database for each NOTIFY, whatever its channel, and each reads the
 * queue (migration 0013): one connection a process, not one a channel, keeps that cost to one.
 * It comes back by itself: when the server goes away (restart, network) it reconnects every
 * second until it is back, then calls every subscriber with '', since whatever was notified
 * meanwhile is lost. The first connect fails loudly, as a pool would.
 */
class Listener {
  readonly #subscribers = new Map<string, Set<OnNotify>>();
  #client: pg.Client | null = null;
  #connecting: Promise<pg.Client> | null = null;
  #retry: NodeJS.Timeout | undefined;

  constructor(private readonly url: string) {}

  async listen(channel: string, onNotify: OnNotify): Promise<() => Promise<void>> {
    const subscribers = this.#subscribers.get(channel) ?? new Set();
    this.#subscribers.set(channel, subscribers.add(onNotify));
    try {
      // LISTEN twice on a channel is one subscription: a connect under way may have sent it already
      await (await this.#connected()).query(`LISTEN ${pg.escapeIdentifier(channel)}`);
    } catch (err) {
      this.#unsubscribe(channel, onNotify);
      throw err;
    }
    return async () => {
      this.#unsubscribe(channel, onNotify);
      if (this.#subscribers.has(channel)) return;
      if (this.#subscribers.size === 0) await this.close();
      else await this.#client?.query(`UNLISTEN ${pg.escapeIdentifier(channel)}`).catch(() => {});
    };
  }

  async close(): Promise<void> {
    this.#subscribers.clear();
    clearTimeout(this.#retry);
    const client = this.#client;
    this.#client = null; // its 'end' then reconnects nothing
    await client?.end().catch(() => {});
  }

  #unsubscribe(channel: string, onNotify: OnNotify): void {
    const subscribers = this.#subscribers.get(channel);
    subscribers?.delete(onNotify);
    if (subscribers?.size === 0) this.#subscribers.delete(channel);
  }

  #connected(): Promise<pg.Client> {
    if (this.#client !== null) return Promise.resolve(this.#client);
    this.#connecting ??= this.#connect().finally(() => (this.#connecting = null));
    return this.#connecting;
  }

  async #connect(): Promise<pg.Client> {
    const client = new pg.Client({ connectionString: this.url });
    client.on('error', () => {}); // 'end' follows, and reconnects
    client.on('end', () => {
      if (this.#client !== client) return;
      this.#client = null;
      this.#reconnectSoon();
    });
    client.on('notification', (msg) => {
      for (const onNotify of this.#subscribers.get(msg.channel) ?? []) onNotify(msg.payload ?? '');
    });
    try {
      await client.connect();
      for (const channel of this.#subscribers.keys()) await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
    } catch (err) {
      await client.end().catch(() => {});
      throw err;
    }
    if (this.#subscribers.size === 0) {
      // closed while connecting
      await client.end().catch(() => {});
      throw new Error('the listener was closed');
    }
    this.#client = client;
    return client;
  }

  #reconnectSoon(): void {
    this.#retry = setTimeout(() => {
      if (this.#subscribers.size === 0) return;
      this.#connected().then(
        () => {
          for (const subscribers of this.#subscribers.values()) for (const onNotify of subscribers) onNotify('');
        },
        () => this.#reconnectSoon(),
      );
    }, 1000).unref();
  }
}

async function openPglite(dataDir: string | undefined, schema: string): Promise<Db> {
  const lite = dataDir === undefined ? new PGlite() : new PGlite(dataDir);
  await lite.waitReady;
  await lite.query(`CREATE SCHEMA IF NOT EXISTS ${pg.escapeIdentifier(schema)}`);
  await lite.query(`SET search_path TO ${pg.escapeIdentifier(schema)}`);
  const pool = new pg.Pool(createPgConfig(lite));
  return {
    pool,
    schema,
    driver: 'pglite',
    // LISTEN through the pg adapter receives nothing on PGlite; its own listen() does.
    async listen(channel, onNotify) {
      return lite.listen(channel, onNotify);
    },
    async close() {
      await pool.end();
      await lite.close();
    },
  };
}
