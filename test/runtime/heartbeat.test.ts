import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import { claimWorkflows } from '../../engine/store/claim-workflows.ts';
import { describeEachDriver } from '../support/db.ts';
import { uniqueLogic } from '../support/engine.ts';
import { gatedService } from '../support/fake-service.ts';
import { waitFor } from '../support/store-checks.ts';

/**
 * The heartbeat's answer is acted on. A worker whose lease was taken while its step's call is in
 * flight abandons the call at its next heartbeat (the owning service sees the request dropped)
 * and tells the observer, instead of waiting for the answer and committing into the fence. A
 * heartbeat that fails is reported, not swallowed. The step's own timeout is ten minutes: an
 * engine that ignores its heartbeats holds the call until the test times out.
 */
const LEASE_MS = 600; // heartbeats every 200 ms

/** An owning service that never answers; it reports each request, and each request dropped unanswered. */
class SilentService {
  readonly arrived: string[] = [];
  readonly dropped: string[] = [];
  #server: Server = createServer((req, res) => {
    const key = String(req.headers['idempotency-key']);
    this.arrived.push(key);
    res.on('close', () => {
      if (!res.writableEnded) this.dropped.push(key);
    });
  });
  url = '';
  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this;
  }
  /** Hangs up on every call in flight (they fail as network errors). */
  hangUp(): void {
    this.#server.closeAllConnections();
  }
  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

describeEachDriver('heartbeats', (getDb) => {
  let svc: SilentService;
  let engine: Engine;
  const lost: string[] = [];
  const errors: { id: string | null; err: unknown }[] = [];
  // one attempt: once the test hangs up, no second call is made to a service that never answers
  const logic = uniqueLogic({ start: 'hang', steps: { hang: { kind: 'proxy', handler: 'test', path: '/hang', timeoutMs: 600_000, retry: { maxAttempts: 1 } } } });

  beforeAll(async () => {
    svc = await new SilentService().listen();
    engine = new Engine({
      db: getDb(),
      env: 'hb-env',
      executors: { handlers: new Map([['TEST', { url: svc.url }]]) },
      // one slot: the pool cannot claim the instance back itself once its lease has run out
      worker: { concurrency: 1, leaseMs: LEASE_MS, pollMs: 20 },
      observer: { onLeaseLost: (id) => lost.push(id), onError: (id, err) => errors.push({ id, err }) },
    });
    await engine.publish(logic, 'hb-env');
  });
  afterEach(async () => {
    await engine.workers.stop();
  });
  afterAll(async () => {
    await svc.close();
  });

  it('a lost lease abandons the call in flight and is reported', async () => {
    const { id } = await engine.start({ logicId: logic.logicId, input: {}, env: 'hb-env' });
    await engine.workers.start();
    await waitFor('the call to arrive', async () => (svc.arrived.length === 1 ? true : undefined));

    // another worker takes the instance over: its lease ran out, and it was claimed anew
    const db = getDb();
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`UPDATE workflows SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, [id]);
      const taken = await claimWorkflows(client, { limit: 1, leaseMs: 600_000 });
      expect(taken.map((s) => s.instance.id)).toEqual([id]);
      await client.query('COMMIT');
    } finally {
      client.release();
    }

    await waitFor('the worker to drop the call', async () => (svc.dropped.length === 1 ? true : undefined));
    await waitFor('the observer to hear of it', async () => (lost.includes(id) ? true : undefined));
    expect(svc.dropped).toEqual(svc.arrived);
    expect(errors).toEqual([]);
    // the taker's lease is untouched: the fenced worker wrote nothing
    const row = await db.pool.query('SELECT state, lease_expires_at > now() + interval \'1 minute\' AS held FROM workflows WHERE id = $1', [id]);
    expect(row.rows[0]).toEqual({ state: 'processing', held: true });
  }, 30_000);

  it('a heartbeat that fails is reported to the observer', async () => {
    const db = getDb();
    // a heartbeat is the one write that moves only lease_expires_at: refuse it
    await db.pool.query(`
      CREATE FUNCTION refuse_heartbeat() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.row_version = OLD.row_version AND NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at THEN
          RAISE EXCEPTION 'heartbeat refused by the test';
        END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER refuse_heartbeat BEFORE UPDATE ON workflows FOR EACH ROW EXECUTE FUNCTION refuse_heartbeat();`);
    try {
      errors.length = 0;
      const { id } = await engine.start({ logicId: logic.logicId, input: {}, env: 'hb-env' });
      await engine.workers.start();
      const seen = await waitFor('the heartbeat error to be reported', async () => errors.find((e) => e.id === id));
      expect(String(seen.err)).toContain('heartbeat refused by the test');
    } finally {
      await db.pool.query('DROP TRIGGER refuse_heartbeat ON workflows; DROP FUNCTION refuse_heartbeat()');
      svc.hangUp(); // the worker still holds its lease and waits on the call: let it go
    }
  }, 30_000);

  it('heartbeats go on while a failing commit is retried, so the lease outlives the retries', async () => {
    const db = getDb();
    // commits (they move row_version) fail while block_commits has a row; heartbeats go through
    await db.pool.query(`
      CREATE TABLE block_commits (x int);
      CREATE FUNCTION block_commits() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
      BEGIN
        IF NEW.row_version <> OLD.row_version AND EXISTS (SELECT 1 FROM block_commits) THEN
          RAISE EXCEPTION 'commit blocked by the test';
        END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER block_commits BEFORE UPDATE ON workflows FOR EACH ROW EXECUTE FUNCTION block_commits();`);
    const { svc: quick, open: answer } = await gatedService('/slow');
    const slowEngine = new Engine({
      db,
      env: 'hb-env',
      executors: { handlers: new Map([['TEST', { url: quick.url }]]) },
      worker: { concurrency: 1, leaseMs: LEASE_MS, pollMs: 20 },
    });
    const slow = uniqueLogic({ start: 'slow', steps: { slow: { kind: 'proxy', handler: 'test', path: '/slow' } } });
    try {
      await slowEngine.publish(slow, 'hb-env');
      const { id } = await slowEngine.start({ logicId: slow.logicId, input: {}, env: 'hb-env' });
      await slowEngine.workers.start();
      await waitFor('the call to arrive', async () => (quick.calls('/slow').length === 1 ? true : undefined));
      const expiry = async () =>
        (await db.pool.query<{ at: Date }>('SELECT lease_expires_at AS at FROM workflows WHERE id = $1', [id])).rows[0]!.at.getTime();

      await db.pool.query('INSERT INTO block_commits VALUES (1)');
      const before = await expiry();
      answer(); // the worker's commit now fails, and is retried with backoff
      // a lease extended past `before + LEASE_MS` was extended after the commit began failing
      await waitFor('a heartbeat during the commit retries', async () => ((await expiry()) > before + LEASE_MS ? true : undefined), {
        timeoutMs: 10_000,
      });
      await db.pool.query('DELETE FROM block_commits');
      const record = await slowEngine.settled(id, 'hb-env');
      expect(record.state).toBe('completed');
      expect(quick.calls('/slow')).toHaveLength(1);
    } finally {
      answer();
      await db.pool.query('DELETE FROM block_commits'); // let the worker's commit through, so it stops
      await slowEngine.workers.stop();
      await quick.close();
      await db.pool.query('DROP TRIGGER block_commits ON workflows; DROP FUNCTION block_commits(); DROP TABLE block_commits');
    }
  }, 30_000);
});
