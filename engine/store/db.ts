import { PGlite } from '@electric-sql/pglite';
import { createPgConfig } from '@electric-sql/pglite/node-postgres';
import pg from 'pg';
import { BadSchemaName } from './errors.ts';

/** One handle on the store, whichever driver is underneath: the SQL is the same on both. */
export interface Db {
  readonly pool: pg.Pool;
  readonly schema: string;
  readonly driver: 'postgres' | 'pglite';
  /**
   * Subscribes to a NOTIFY channel; returns the unsubscribe function. `onNotify` gets the payload,
   * or '' after a reconnect, when anything may have changed meanwhile.
   */
  listen(channel: string, onNotify: (payload: string) => void): Promise<() => Promise<void>>;
  close(): Promise<void>;
}

export interface OpenDbOptions {
  /** Schema holding the tables. (Default: `flow`) */
  schema?: string;
  /** Connections in the pool; PGlite always uses 1 (one session). (Default: 10) */
  poolSize?: number;
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
  if (url !== undefined && /^postgres(ql)?:\/\//.test(url)) return openPostgres(url, schema, opts.poolSize ?? 10);
  return openPglite(url, schema);
}

function openPostgres(url: string, schema: string, max: number): Db {
  const pool = new pg.Pool({ connectionString: url, max, options: `-c search_path=${schema}` });
  // An idle client that loses its connection (server restart) emits here; without a listener
  // the process would crash. The pool drops the client and opens a new one on next use.
  pool.on('error', () => {});
  // A client checked out when its connection drops emits 'error' as well, and the pool listens
  // only to idle ones: unheard, that error crashed the process. The query in flight rejects with
  // it anyway, and the pool discards the broken client when it is released.
  pool.on('connect', (client) => client.on('error', () => {}));
  return {
    pool,
    schema,
    driver: 'postgres',
    listen: (channel, onNotify) => listenReconnecting(url, channel, onNotify),
    close: () => pool.end(),
  };
}

/**
 * LISTEN on a connection of its own that comes back by itself: when the server goes away
 * (restart, network) it reconnects every second until it is back, then calls `onNotify` once,
 * since whatever was notified meanwhile is lost. The first connect fails loudly, as a pool would.
 */
async function listenReconnecting(url: string, channel: string, onNotify: (payload: string) => void): Promise<() => Promise<void>> {
  let current: pg.Client | null = null;
  let closed = false;
  let retry: NodeJS.Timeout | undefined;
  const connect = async (): Promise<void> => {
    const client = new pg.Client({ connectionString: url });
    client.on('error', () => {}); // 'end' follows, and reconnects
    client.on('end', () => {
      if (closed || current !== client) return;
      current = null;
      reconnectSoon();
    });
    client.on('notification', (msg) => onNotify(msg.payload ?? ''));
    try {
      await client.connect();
      await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
    } catch (err) {
      await client.end().catch(() => {});
      throw err;
    }
    if (closed) {
      await client.end().catch(() => {});
      return;
    }
    current = client;
  };
  const reconnectSoon = () => {
    retry = setTimeout(() => {
      connect().then(() => onNotify(''), reconnectSoon);
    }, 1000).unref();
  };
  await connect();
  return async () => {
    closed = true;
    clearTimeout(retry);
    await current?.end().catch(() => {});
  };
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
