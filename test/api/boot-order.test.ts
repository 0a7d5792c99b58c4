import { Writable } from 'node:stream';
import { expect, it } from 'vitest';
import { buildApi } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { openDb } from '../../engine/store/db.ts';
import { migrate } from '../../engine/store/migrate.ts';
import { AUTH_SECRET } from './support.ts';

/**
 * `s8flow start` builds the API before it migrates (a bad auth key stops boot with the database
 * untouched). Nothing the API does on its own may reach the database before the migration is
 * done: on a fresh database that logged `role "flow_engine" does not exist`.
 */
it('a fresh database logs no error or warning at first boot: bulk jobs resume once the database is migrated', async () => {
  const lines: { level: number; msg: string }[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  const db = await openDb();
  const engine = new Engine({ db });
  let migrated: () => void = () => {};
  const databaseReady = new Promise<void>((r) => {
    migrated = r;
  });
  const api = await buildApi({ engine, auth: { secret: AUTH_SECRET, production: false }, logger: { level: 'info', stream }, console: { databaseReady } });
  try {
    await new Promise((r) => setTimeout(r, 200)); // what a resume started at once would log, it has logged by now
    await migrate(db);
    migrated();
    await new Promise((r) => setTimeout(r, 200));
    expect(lines.filter((l) => l.level >= 40)).toEqual([]);
  } finally {
    await api.close();
    await engine.close();
    await db.close();
  }
});
