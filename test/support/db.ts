import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe } from 'vitest';
import { type Db, openDb } from '../../engine/store/db.ts';
import { dropSchema, migrate } from '../../engine/store/migrate.ts';

export type Driver = 'pglite' | 'postgres';

/** PGlite always; real Postgres too when DATABASE_URL is set (CI sets it). */
export const DRIVERS: Driver[] = process.env['DATABASE_URL'] ? ['pglite', 'postgres'] : ['pglite'];

/**
 * With FLOW_TEST_PGBOUNCER_URL (scripts/with-pgbouncer.sh), Postgres stores are opened through a
 * transaction-mode PgBouncer: as a role of their own whose search_path is the test schema (the
 * pooler sends no startup options), with LISTEN on the direct DATABASE_URL.
 */
const POOLED = process.env['FLOW_TEST_PGBOUNCER_URL'];

async function direct(sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: process.env['DATABASE_URL'] });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** A migrated store in a schema of its own, dropped afterwards. */
export async function openTestDb(driver: Driver, opts: { poolSize?: number } = {}): Promise<Db> {
  const schema = `flow_test_${randomBytes(6).toString('hex')}`;
  if (driver === 'postgres' && POOLED) {
    await direct(`CREATE ROLE ${schema} LOGIN SUPERUSER; ALTER ROLE ${schema} SET search_path = ${schema}`);
    const url = new URL(POOLED);
    url.username = schema;
    const db = await openDb(url.toString(), { schema, listenUrl: process.env['DATABASE_URL']!, ...opts });
    await migrate(db);
    return db;
  }
  const db = await openDb(driver === 'postgres' ? process.env['DATABASE_URL'] : undefined, { schema, ...opts });
  await migrate(db);
  return db;
}

export async function closeTestDb(db: Db): Promise<void> {
  if (db.driver === 'postgres') await dropSchema(db);
  await db.close();
  // the pooler may hold an idle server connection of the role a while: a role in use stays
  if (db.driver === 'postgres' && POOLED) await direct(`DROP ROLE IF EXISTS ${db.schema}`).catch(() => {});
}

/** Runs the same suite once per driver, each with its own store. */
export function describeEachDriver(name: string, suite: (getDb: () => Db, driver: Driver) => void): void {
  for (const driver of DRIVERS) {
    describe(`${name} [${driver}]`, () => {
      let db: Db;
      beforeAll(async () => {
        db = await openTestDb(driver);
      });
      afterAll(async () => {
        await closeTestDb(db);
      });
      suite(() => db, driver);
    });
  }
}
