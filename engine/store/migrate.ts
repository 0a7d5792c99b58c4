import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import type { Db } from './db.ts';

const MIGRATIONS_DIR = new URL('./migrations/', import.meta.url).pathname;

/**
 * Applies the numbered `.sql` migrations not yet applied to the schema, all in one transaction
 * under an advisory lock keyed by the schema name: a second migrator waits, then finds nothing
 * left to do. Returns the names it applied.
 */
export async function migrate(db: Db): Promise<string[]> {
  const files = readdirSync(MIGRATIONS_DIR)
    .filter((f) => /^\d{4}_.+\.sql$/.test(f))
    .sort();
  const schema = pg.escapeIdentifier(db.schema);
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`sentin8-flow:migrate:${db.schema}`]);
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
    await client.query(`SET LOCAL search_path TO ${schema}`);
    await client.query(
      'CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())',
    );
    const done = new Set((await client.query<{ name: string }>('SELECT name FROM schema_migrations')).rows.map((r) => r.name));
    const applied: string[] = [];
    for (const file of files.filter((f) => !done.has(f))) {
      await client.query(readFileSync(join(MIGRATIONS_DIR, file), 'utf8'));
      await client.query('INSERT INTO schema_migrations (name) VALUES ($1)', [file]);
      applied.push(file);
    }
    await client.query('COMMIT');
    return applied;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

/** Drops a schema and everything in it (tests use one schema per file). */
export async function dropSchema(db: Db): Promise<void> {
  await db.pool.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(db.schema)} CASCADE`);
}
