import { PGlite } from '@electric-sql/pglite';
import { createPgConfig } from '@electric-sql/pglite/node-postgres';
import pg from 'pg';
import { BadSchemaName } from './errors.ts';

/** One handle on the store, whichever driver is underneath: the SQL is the same on both. */
export interface Db {
  readonly pool: pg.Pool;
  readonly schema: string;
  readonly driver: 'postgres' | 'pglite';
  /** Subscribes to a NOTIFY channel; returns the unsubscribe function. */
  listen(channel: string, onNotify: () => void): Promise<() => Promise<void>>;
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
    async listen(channel, onNotify) {
      const client = new pg.Client({ connectionString: url });
      client.on('error', () => {});
      await client.connect();
      client.on('notification', onNotify);
      await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
      return async () => {
        await client.end().catch(() => {});
      };
    },
    close: () => pool.end(),
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
