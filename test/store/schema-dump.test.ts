import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { dumpSchema, SCHEMA_FILE } from '../../scripts/dump-schema.ts';

const MIGRATIONS = new URL('../../engine/store/migrations/', import.meta.url).pathname;
const ARCHITECTURE = new URL('../../ARCHITECTURE.md', import.meta.url).pathname;

// engine/store/schema.sql is what a migrated store holds, so that the functions Postgres runs
// today read in one place. Postgres only: the dump is pg_dump's.
describe.skipIf(!process.env['DATABASE_URL'])('engine/store/schema.sql is the schema the migrations build [postgres]', () => {
  it('matches a fresh dump', async () => {
    const fresh = await dumpSchema(process.env['DATABASE_URL']!);
    const stale = readFileSync(SCHEMA_FILE, 'utf8') !== fresh;
    // the whole text on failure would bury the message; the diff is `git diff` after the dump
    expect(stale, 'engine/store/schema.sql is stale: run npm run schema:dump').toBe(false);
  });
});

describe('ARCHITECTURE.md, Data model, names the migration holding each function as it runs today', () => {
  it('lists every function with the last migration that creates it', () => {
    const live = new Map<string, string>();
    for (const file of readdirSync(MIGRATIONS).filter((f) => /^\d{4}_.+\.sql$/.test(f)).sort()) {
      const sql = readFileSync(MIGRATIONS + file, 'utf8');
      for (const m of sql.matchAll(/CREATE (?:OR REPLACE )?FUNCTION\s+(\w+)\s*\(/g)) live.set(m[1]!, file);
    }
    const listed = new Map<string, string>();
    for (const m of readFileSync(ARCHITECTURE, 'utf8').matchAll(/^\| `(\w+)\(\)` \| `(\d{4}_[^`]+\.sql)` \|/gm)) listed.set(m[1]!, m[2]!);
    expect(Object.fromEntries(listed), 'update the functions table in ARCHITECTURE.md, Data model').toEqual(Object.fromEntries(live));
  });
});
