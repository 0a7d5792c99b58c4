/**
 * The engine through a transaction-mode PgBouncer (1.18: no prepared statements, no startup
 * options, LISTEN lands on whichever server connection). Runs under scripts/with-pgbouncer.sh,
 * which `.ci/run` uses; without FLOW_TEST_PGBOUNCER_URL there is no pooler to go through.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import { type Db, openDb } from '../../engine/store/db.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { closeTestDb, openTestDb } from '../support/db.ts';
import { FakeService } from '../support/fake-service.ts';

const POOLED = process.env['FLOW_TEST_PGBOUNCER_URL'];

function chain(logicId: string, steps: number) {
  const defs: Record<string, { kind: 'proxy'; path: string; next?: string }> = {};
  for (let i = 0; i < steps; i++) defs[`s${i}`] = { kind: 'proxy', path: '/step', ...(i + 1 < steps ? { next: `s${i + 1}` } : {}) };
  return makeLogic({ logicId, domain: 'pool', start: 's0', steps: defs });
}

describe.skipIf(!POOLED)('through PgBouncer in transaction mode', () => {
  let svc: FakeService;
  beforeAll(async () => {
    svc = await new FakeService().on('/step', () => ({ status: 200, body: { ok: true } })).listen();
  });
  afterAll(() => svc.close());

  it('a named prepared statement breaks behind the pooler, which is why the engine sends none', async () => {
    // the control: what the engine did before it knew of poolers, on 8 connections at once
    const pool = new pg.Pool({ connectionString: POOLED!.replace('?pgbouncer=true', ''), max: 8 });
    const errors: string[] = [];
    await Promise.all(
      Array.from({ length: 64 }, (_, i) =>
        pool.query({ name: 'flow_probe', text: 'SELECT $1::int AS n', values: [i] }).catch((err: Error) => {
          errors.push(err.message);
        }),
      ),
    );
    await pool.end();
    expect(errors.some((m) => /prepared statement .* (does not exist|already exists)/.test(m))).toBe(true);
  });

  for (const wakeUps of ['LISTEN on a direct connection', 'the idle poll alone'] as const) {
    it(`runs workflows to the end on several engines, with ${wakeUps}`, async () => {
      const first = await openTestDb('postgres', { poolSize: 6 });
      const url = new URL(POOLED!);
      url.username = first.schema;
      const dbs: Db[] = [first];
      for (let i = 0; i < 2; i++) {
        dbs.push(await openDb(url.toString(), { schema: first.schema, poolSize: 6, ...(wakeUps === 'LISTEN on a direct connection' ? { listenUrl: process.env['DATABASE_URL']! } : {}) }));
      }
      // every statement must succeed the first time: a retried one hides a pooler fault
      const errors: string[] = [];
      const observer = { onError: (_id: string | null, err: unknown) => void errors.push(String(err)) };
      const engines = dbs.map((db) => new Engine({ db, executors: { handlers: new Map([['POOL', { url: svc.url }]]) }, worker: { concurrency: 4, pollMs: 20 }, observer }));
      const logic = chain(`pool.chain_${randomBytes(3).toString('hex')}`, 5);
      await engines[0]!.publish(logic);
      for (const e of engines) await e.workers.start();
      const ids = await Promise.all(Array.from({ length: 30 }, (_, i) => engines[i % engines.length]!.start({ logicId: logic.logicId, input: {} })));
      const records = await Promise.all(ids.map(({ id }) => engines[0]!.settled(id)));
      for (const e of engines) await e.close();
      for (const db of dbs.slice(1)) await db.close();
      await closeTestDb(first);
      expect(errors).toEqual([]);
      expect(records.map((r) => r.state)).toEqual(records.map(() => 'completed'));
      const keys = svc.calls('/step').map((c) => c.headers['idempotency-key']);
      expect(new Set(keys).size).toBe(keys.length);
    });
  }

  it('refuses a pooled URL whose role does not name the schema, with a coded error', async () => {
    await expect(openDb(POOLED!, { schema: `flow_test_${randomBytes(6).toString('hex')}` })).rejects.toMatchObject({ code: 'FLOW_DB_SEARCH_PATH' });
  });
});
