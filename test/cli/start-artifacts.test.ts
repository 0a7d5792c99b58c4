import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../engine/store/db.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { closeTestDb, openTestDb } from '../support/db.ts';
import { WorkerProcess } from '../support/worker-process.ts';

const FIXTURES = fileURLToPath(new URL('../fixtures/compiled/', import.meta.url));
const url = process.env['DATABASE_URL'];

describe.skipIf(!url)('s8flow start --artifacts [postgres]', () => {
  let db: Db;
  beforeAll(async () => {
    db = await openTestDb('postgres');
  });
  afterAll(() => closeTestDb(db));

  it('publishes the directory’s versions and their module bytes into the database before it runs', async () => {
    const worker = await WorkerProcess.start({ databaseUrl: url!, schema: db.schema, env: 'artifacts-env', handlerUrl: 'http://127.0.0.1:9', args: ['--artifacts', FIXTURES] });
    await worker.stop();
    const rows = await asScheduler(db, async (c) => ({
      versions: (await c.query<{ k: string }>(`SELECT logic_id || '@' || version AS k FROM logic_versions WHERE env_id = 'artifacts-env' ORDER BY 1`)).rows.map((r) => r.k),
      modules: (await c.query<{ sha256: string; bytes: Buffer }>(`SELECT sha256, bytes FROM modules WHERE env_id = 'artifacts-env'`)).rows,
    }));
    expect(rows.versions).toEqual(['payments.capture@2', 'payments.capture@3', 'provisioning.service@1', 'provisioning.tenant@1', 'statements.monthly@2']);
    expect(rows.modules.map((m) => m.sha256)).toEqual(['1db019dd1bf6c9213d2af71f134b730591f0e5fd8414acf5e62393e097a27c7e']);
    for (const m of rows.modules) expect(createHash('sha256').update(m.bytes).digest('hex')).toBe(m.sha256);
  });
});
