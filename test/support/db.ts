import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe } from 'vitest';
import { type Db, openDb } from '../../engine/store/db.ts';
import { dropSchema, migrate } from '../../engine/store/migrate.ts';

export type Driver = 'pglite' | 'postgres';

/** PGlite always; real Postgres too when DATABASE_URL is set (CI sets it). */
export const DRIVERS: Driver[] = process.env['DATABASE_URL'] ? ['pglite', 'postgres'] : ['pglite'];

/** A migrated store in a schema of its own, dropped afterwards. */
export async function openTestDb(driver: Driver, opts: { poolSize?: number } = {}): Promise<Db> {
  const schema = `flow_test_${randomBytes(6).toString('hex')}`;
  const db = await openDb(driver === 'postgres' ? process.env['DATABASE_URL'] : undefined, { schema, ...opts });
  await migrate(db);
  return db;
}

export async function closeTestDb(db: Db): Promise<void> {
  if (db.driver === 'postgres') await dropSchema(db);
  await db.close();
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
