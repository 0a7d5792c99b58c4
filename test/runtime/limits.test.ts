import { afterEach, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import type { HandlerProfile } from '../../engine/executors/handlers.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { claimWorkflows } from '../../engine/store/claim-workflows.ts';
import { acquirePermits, listWaiters, putOverride } from '../../engine/store/permits.ts';
import type { Stored } from '../../engine/store/rows.ts';
import { asScheduler, type Queryable } from '../../engine/store/tx.ts';
import { describeEachDriver } from '../support/db.ts';
import { callChain, uniqueLogic } from '../support/engine.ts';
import { CountingService } from '../support/counting-service.ts';
import { waitFor } from '../support/store-checks.ts';

/**
 * Limits hold at the service: what is counted is what the owning service saw (calls in flight at
 * once, per key), never the engine's own bookkeeping.
 */
const ENV = 'limits';

function callLogic(extra: Partial<LogicVersion> = {}, step: Record<string, unknown> = {}): LogicVersion {
  return uniqueLogic({
    start: 'call',
    steps: { call: { kind: 'proxy', handler: 'svc', path: '/call', input: 'input', next: null, ...step } as never },
    ...extra,
  });
}

describeEachDriver('limits', (getDb, driver) => {
  const open: { engine: Engine; svc: CountingService }[] = [];
  afterEach(async () => {
    for (const { engine, svc } of open.splice(0)) {
      svc.open();
      await engine.close();
      await svc.close();
    }
  });

  async function setup(limit: HandlerProfile['limit'], opts: { pollMs?: number; sweepMs?: number } = {}) {
    const svc = await new CountingService().listen();
    const engine = new Engine({
      db: getDb(),
      env: ENV,
      executors: { handlers: new Map([['SVC', { url: svc.url, ...(limit ? { limit } : {}) }]]) },
      worker: { concurrency: 8, pollMs: opts.pollMs ?? 50 },
      permitSweepMs: opts.sweepMs ?? 0,
    });
    open.push({ engine, svc });
    return { svc, engine };
  }

  async function allEnded(engine: Engine, ids: string[]): Promise<void> {
    await waitFor('every instance ended', async () => {
      const res = await engine.db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM workflows WHERE id = ANY($1) AND state = 'completed'`, [ids]);
      return Number(res.rows[0]!.n) === ids.length ? true : undefined;
    }, { timeoutMs: 20_000 });
  }

  it('per-key limit 1: two calls with the same key never overlap at the service, and waiting used no attempt', async () => {
    const { svc, engine } = await setup(undefined);
    const logic = callLogic({}, { concurrency: { key: 'input.key', limit: 1 } });
    await engine.publish(logic, ENV);
    // every call waits at the service until all have started: keys compete for the pool's 8 executors
    svc.hold();
    await engine.workers.start();
    const ids: string[] = [];
    for (let i = 0; i < 24; i++) ids.push((await engine.start({ env: ENV, logicId: logic.logicId, input: { key: `k${i % 3}` } })).id);
    await waitFor('three calls in flight', async () => (svc.inFlight >= 3 ? true : undefined));
    svc.open();
    await allEnded(engine, ids);
    expect(svc.calls('/call')).toHaveLength(24);
    expect(svc.overlaps).toBe(0);
    // the pool ran 8 at once: keys did compete (else the check proves nothing)
    const waited = await engine.db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM step_runs WHERE workflow_id = ANY($1)`, [ids]);
    expect(Number(waited.rows[0]!.n)).toBe(24);
  });

  it('a workflow-wide key: at most `limit` instances of one key not ended at once', async () => {
    const { svc, engine } = await setup(undefined);
    const logic = callLogic({ concurrency: { key: 'input.key', limit: 1 } });
    await engine.publish(logic, ENV);
    svc.hold();
    await engine.workers.start();
    const ids: string[] = [];
    for (let i = 0; i < 12; i++) ids.push((await engine.start({ env: ENV, logicId: logic.logicId, input: { key: `k${i % 2}` } })).id);
    await waitFor('two calls in flight', async () => (svc.inFlight >= 2 ? true : undefined));
    svc.open();
    await allEnded(engine, ids);
    expect(svc.overlaps).toBe(0);
  });

  it('a handler capped at 2: never more than 2 calls in flight; waiters are woken by releases, not by a poll', async () => {
    // a poll interval of an hour and no sweep: only the releasers' wake-ups can move the waiters
    const { svc, engine } = await setup({ concurrency: 2, rate: null, burst: null }, { pollMs: 3_600_000 });
    const logic = callLogic();
    await engine.publish(logic, ENV);
    svc.hold();
    await engine.workers.start();
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) ids.push((await engine.start({ env: ENV, logicId: logic.logicId, input: { key: `k${i}` } })).id);
    await waitFor('two calls in flight and eight waiting', async () => {
      const waiting = await asScheduler(engine.db, (c) => listWaiters(c, { env: ENV, limit: 100 }));
      return svc.inFlight === 2 && waiting.length === 8 ? true : undefined;
    });
    const waiting = await asScheduler(engine.db, (c) => listWaiters(c, { env: ENV, limit: 100 }));
    expect(new Set(waiting.map((w) => `${w.scope} ${w.resource} ${w.reason}`))).toEqual(new Set(['* handler:SVC concurrency']));
    svc.open();
    await allEnded(engine, ids);
    expect(svc.maxInFlight).toBe(2);
    const runs = await engine.db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM step_runs WHERE workflow_id = ANY($1)`, [ids]);
    expect(Number(runs.rows[0]!.n)).toBe(10);
  });

  /** Counts the lone acquire_permits() statements the engine sends (the ones not riding in a commit). */
  function countAcquires(engine: Engine): () => number {
    let n = 0;
    const pool = engine.db.pool as unknown as { query: (...args: unknown[]) => unknown };
    const query = pool.query.bind(pool);
    pool.query = (...args: unknown[]) => {
      if ((args[0] as { name?: string } | null)?.name === 'flow_acquire_permits') n++;
      return query(...args);
    };
    return () => n;
  }

  it('a chain takes the permits of every attempt in a batched commit: none in a statement of its own', async () => {
    const { svc, engine } = await setup({ concurrency: 100, rate: null, burst: null });
    const acquires = countAcquires(engine);
    const logic = callChain(4);
    await engine.publish(logic, ENV);
    await engine.workers.start();
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await engine.start({ env: ENV, logicId: logic.logicId, input: { key: `k${i}` } })).id);
    await allEnded(engine, ids);
    expect(svc.calls('/call')).toHaveLength(12);
    // the first attempt of each, claimed, takes its permits in the next batch (migration 0038);
    // the next three ride in the commit of the one before (0037)
    expect(acquires()).toBe(0);
  });

  /** Notes every insert and update of a permit row (a trigger of this test's schema): its workflow's id. */
  async function notePermitWrites(engine: Engine): Promise<(ids: string[]) => Promise<number>> {
    const schema = engine.db.schema;
    await engine.db.pool.query(`CREATE TABLE IF NOT EXISTS permit_writes (workflow_id uuid NOT NULL)`);
    await engine.db.pool.query(
      `CREATE OR REPLACE FUNCTION note_permit_write() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = ${schema} AS $$
       BEGIN INSERT INTO permit_writes VALUES (NEW.workflow_id); RETURN NEW; END $$`,
    );
    await engine.db.pool.query(`DROP TRIGGER IF EXISTS permit_written ON permits`);
    await engine.db.pool.query(`CREATE TRIGGER permit_written AFTER INSERT OR UPDATE ON permits FOR EACH ROW EXECUTE FUNCTION note_permit_write()`);
    return async (ids) => Number((await engine.db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM permit_writes WHERE workflow_id = ANY($1)`, [ids])).rows[0]!.n);
  }

  it('a chain under one lease keeps its concurrency permit: written once, not once an attempt', async () => {
    // room to spare, but too little to lend an engine of 8 executors (allowances.ts): the permit is a row
    const { svc, engine } = await setup({ concurrency: 20, rate: null, burst: null });
    const writes = await notePermitWrites(engine);
    const logic = callChain(4);
    await engine.publish(logic, ENV);
    await engine.workers.start();
    const id = (await engine.start({ env: ENV, logicId: logic.logicId, input: { key: 'k' } })).id;
    await allEnded(engine, [id]);
    expect(svc.calls('/call')).toHaveLength(4);
    // taken for the first attempt; the next three go on under the same lease with the same permit
    expect(await writes([id])).toBe(1);
  });

  it('a chain whose next step needs no permit yields it at once: a waiter runs while the chain goes on', async () => {
    const db = getDb();
    const svc = await new CountingService().listen();
    const other = await new CountingService().listen();
    const engine = new Engine({
      db,
      env: ENV,
      executors: { handlers: new Map([['SVC', { url: svc.url, limit: { concurrency: 1, rate: null, burst: null } }], ['OTHER', { url: other.url }]]) },
      worker: { concurrency: 8, pollMs: 50 },
      permitSweepMs: 0,
    });
    open.push({ engine, svc });
    try {
      const chain = uniqueLogic({
        start: 'capped',
        steps: {
          capped: { kind: 'proxy', handler: 'svc', path: '/call', input: 'input', next: 'free' },
          free: { kind: 'proxy', handler: 'other', path: '/call', input: 'input', next: null },
        } as never,
      });
      const single = callLogic();
      await engine.publish(chain, ENV);
      await engine.publish(single, ENV);
      other.hold();
      await engine.workers.start();
      const a = (await engine.start({ env: ENV, logicId: chain.logicId, input: { key: 'a' } })).id;
      await waitFor('the chain at its step without a permit', async () => (other.inFlight === 1 ? true : undefined));
      // the capped handler's only permit is free: a newcomer takes it while the chain's call is held
      const b = (await engine.start({ env: ENV, logicId: single.logicId, input: { key: 'b' } })).id;
      await allEnded(engine, [b]);
      other.open();
      await allEnded(engine, [a]);
    } finally {
      other.open();
      await other.close();
    }
  });

  it('a chain of calls under a cap of 2: never more than 2 in flight, though each next attempt takes its permit in a commit', async () => {
    const { svc, engine } = await setup({ concurrency: 2, rate: null, burst: null }, { pollMs: 3_600_000 });
    const logic = callChain(3);
    await engine.publish(logic, ENV);
    await engine.workers.start();
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push((await engine.start({ env: ENV, logicId: logic.logicId, input: { key: `k${i}` } })).id);
    await allEnded(engine, ids);
    expect(svc.calls('/call')).toHaveLength(18);
    expect(svc.maxInFlight).toBe(2);
  });

  it('a limit changed at runtime applies to the work already waiting', async () => {
    const { svc, engine } = await setup({ concurrency: 1, rate: null, burst: null }, { pollMs: 3_600_000 });
    const logic = callLogic();
    await engine.publish(logic, ENV);
    svc.hold();
    await engine.workers.start();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await engine.start({ env: ENV, logicId: logic.logicId, input: { key: `k${i}` } })).id);
    await waitFor('one call in flight, four waiting', async () => {
      const waiting = await asScheduler(engine.db, (c) => listWaiters(c, { env: ENV, limit: 100 }));
      return svc.inFlight === 1 && waiting.length === 4 ? true : undefined;
    });
    // the first call is still held at the service: only the raised limit can let the others in
    await asScheduler(engine.db, (c) => putOverride(c, { scope: '*', resource: 'handler:SVC', limit: { concurrency: 5, rate: null, burst: null }, actor: 'ops' }));
    await waitFor('five calls in flight', async () => (svc.inFlight === 5 ? true : undefined));
    svc.open();
    await allEnded(engine, ids);
  });

  it('a limit lowered at runtime holds for chains already running: a permit kept under the lease is counted again', async () => {
    const { svc, engine } = await setup({ concurrency: 2, rate: null, burst: null }, { pollMs: 3_600_000 });
    const logic = callChain(5);
    await engine.publish(logic, ENV);
    svc.hold();
    await engine.workers.start();
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) ids.push((await engine.start({ env: ENV, logicId: logic.logicId, input: { key: `k${i}` } })).id);
    await waitFor('both chains at their first call', async () => (svc.inFlight === 2 ? true : undefined));
    const override = (limit: { concurrency: number; rate: null; burst: null } | null) =>
      asScheduler(engine.db, (c) => putOverride(c, { scope: '*', resource: 'handler:SVC', limit, actor: 'ops' }));
    await override({ concurrency: 1, rate: null, burst: null });
    try {
      // from here on, a call starts only where no other is in flight
      svc.maxInFlight = 0;
      svc.open();
      await allEnded(engine, ids);
      expect(svc.calls('/call')).toHaveLength(10);
      expect(svc.maxInFlight).toBe(1);
    } finally {
      await override(null);
    }
  });

  it('a chain that keeps its permit under the lease yields it to one waiting: the waiter goes next, not after the chain', async () => {
    const { svc, engine } = await setup({ concurrency: 1, rate: null, burst: null }, { pollMs: 3_600_000 });
    const chain = callChain(5);
    const single = callLogic();
    await engine.publish(chain, ENV);
    await engine.publish(single, ENV);
    svc.hold();
    await engine.workers.start();
    const a = (await engine.start({ env: ENV, logicId: chain.logicId, input: { key: 'a' } })).id;
    await waitFor('the chain at its first call', async () => (svc.inFlight === 1 ? true : undefined));
    const b = (await engine.start({ env: ENV, logicId: single.logicId, input: { key: 'b' } })).id;
    await waitFor('the newcomer in line', async () => ((await asScheduler(engine.db, (c) => listWaiters(c, { env: ENV, limit: 10 }))).length === 1 ? true : undefined));
    svc.open();
    await allEnded(engine, [a, b]);
    const order = svc.calls('/call').map((c) => (c.body as { key: string }).key);
    expect(order).toEqual(['a', 'b', 'a', 'a', 'a', 'a']);
  });

  it('a chain that keeps its permit under the lease still takes a rate token for each call', async () => {
    const { svc, engine } = await setup({ concurrency: 100, rate: 5, burst: 1 });
    // the configured limit, not an override an earlier test of this store left
    await asScheduler(engine.db, (c) => putOverride(c, { scope: '*', resource: 'handler:SVC', limit: null, actor: 'test' }));
    const logic = callChain(6);
    await engine.publish(logic, ENV);
    await engine.workers.start();
    const id = (await engine.start({ env: ENV, logicId: logic.logicId, input: { key: 'k' } })).id;
    await allEnded(engine, [id]);
    expect(svc.calls('/call')).toHaveLength(6);
    // one token at once, then one each 200 ms: the sixth call 0.8 s after the second at the
    // earliest (counted from the second: the first call of a new engine may reach the service late,
    // and read 975 ms to the sixth under load)
    expect(svc.arrivals.at(-1)! - svc.arrivals[1]!).toBeGreaterThanOrEqual(790);
  });

  /** An engine whose pool does not run (leases are taken by hand), with `n` instances of a one-call definition started, and a way to start more. */
  async function idle(n: number) {
    const db = getDb();
    const svc = await new CountingService().listen();
    const engine = new Engine({ db, env: ENV, executors: { handlers: new Map([['SVC', { url: svc.url }]]) }, permitSweepMs: 0 });
    open.push({ engine, svc });
    const logic = callLogic();
    await engine.publish(logic, ENV);
    const start = async () => (await engine.start({ env: ENV, logicId: logic.logicId, input: {} })).id;
    const ids = await Promise.all(Array.from({ length: n }, start));
    return { db, engine, ids, start };
  }

  /** `n` instances claimed by hand, and a way to take permits on resources (cap 1 each) for one of them. */
  async function byHand(n: number) {
    const { db, engine, ids } = await idle(n);
    const held = new Map((await claimWorkflows(db.pool, { limit: 10, leaseMs: 60_000 })).map((s) => [s.instance.id, s]));
    // resources of this test's own (the suite shares its database)
    const tag = crypto.randomUUID();
    const need = (resource: string) => ({ scope: ENV, resource: `${resource}:${tag}`, key: '', concurrency: 1, rate: null, burst: null, workflowWide: false });
    const take = async (id: string, resources: string[], on: Queryable = db.pool) => {
      const lease = held.get(id)!;
      return (await acquirePermits(on, { id, token: lease.leaseToken!, rowVersion: lease.rowVersion, needs: resources.map(need) })).wait;
    };
    /** Claims the instance again (after a wake-up): its new lease is the one `take` uses. */
    const reclaim = async (id: string) => {
      const again = (await claimWorkflows(db.pool, { limit: 10, leaseMs: 60_000 })).find((s) => s.instance.id === id);
      expect(again).toBeDefined();
      held.set(id, again!);
    };
    const expire = (id: string) => asScheduler(db, (c) => c.query(`UPDATE workflows SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, [id]));
    const waitsOn = async (id: string, resources: string[], on?: Queryable) => (await take(id, resources, on))?.resource.replace(`:${tag}`, '') ?? null;
    return { db, engine, ids, take: waitsOn, reclaim, expire };
  }

  it('an instance woken for one limit but held back by another keeps no room of the first', async () => {
    const { engine, ids, take, reclaim, expire } = await byHand(4);
    const [x, y, w, z] = ids as [string, string, string, string];
    // x holds b, y holds a; w needs both and waits on a (taken in order: a, then b)
    expect(await take(x, ['test:b'])).toBeNull();
    expect(await take(y, ['test:a'])).toBeNull();
    expect(await take(w, ['test:a', 'test:b'])).toBe('test:a');
    // y's holder dies; the sweep wakes w for a; w finds a free but b still held, and waits on b
    await expire(y);
    expect(await engine.permits.sweep()).toBe(1);
    await reclaim(w);
    expect(await take(w, ['test:a', 'test:b'])).toBe('test:b');
    // a is free and w does not wait on it: z takes it (w's wake-up for a does not hold a's room)
    expect(await take(z, ['test:a'])).toBeNull();
  });

  // two connections at once: not on the embedded store's one
  it.skipIf(driver === 'pglite')('a release that races a waiter still queueing wakes it once the waiter is in line', async () => {
    const { db, engine, ids, take } = await byHand(2);
    const [h, a] = ids as [string, string];
    expect(await take(h, ['test:a'])).toBeNull();
    // a queues behind h in a transaction not yet committed as h's attempt ends and h releases
    const c = await db.pool.connect();
    try {
      await c.query('BEGIN');
      expect(await take(a, ['test:a'], c)).toBe('test:a');
      await db.pool.query(`UPDATE workflows SET row_version = row_version + 1, lease_token = NULL WHERE id = $1`, [h]);
      const released = engine.permits.release({ id: h, ended: false });
      await c.query('COMMIT');
      expect(await released).toBe(1);
    } finally {
      c.release();
    }
  });

  it('a line for a rate is served at the rate: waiters that come late take at most a tenth of a second of tokens at once, not the burst', async () => {
    const { db, ids } = await idle(4);
    const need = { scope: ENV, resource: `test:paced:${crypto.randomUUID()}`, key: '', concurrency: null, rate: 10, burst: 10, workflowWide: false };
    // the bucket is empty: every one of them joins the line, a turn each 100 ms
    await asScheduler(db, (c) => c.query(`INSERT INTO limit_buckets (env_id, resource, key, tokens, refilled_at) VALUES ($1, $2, '', 0, clock_timestamp())`, [ENV, need.resource]));
    let held = new Map<string, Stored>();
    const claim = async () => {
      held = new Map((await claimWorkflows(db.pool, { limit: 10, leaseMs: 60_000 })).map((s) => [s.instance.id, s]));
    };
    const take = async (id: string) => {
      const lease = held.get(id)!;
      return (await acquirePermits(db.pool, { id, token: lease.leaseToken!, rowVersion: lease.rowVersion, needs: [need] })).wait;
    };
    await claim();
    for (const id of ids) expect((await take(id))?.wakeInMs).toBeGreaterThan(0);
    // their turns came a second ago and nobody took a token since: the bucket is full again
    await asScheduler(db, async (c) => {
      await c.query(`UPDATE limit_buckets SET refilled_at = clock_timestamp() - interval '1 second' WHERE resource = $1`, [need.resource]);
      await c.query(`UPDATE workflows SET lease_expires_at = now() - interval '1 millisecond' WHERE id = ANY($1)`, [ids]);
    });
    await claim();
    const waits = [];
    for (const id of ids) waits.push(await take(id));
    // 1 + 10/s x 0.1 s = 2 go at once; the others wait for their token, 100 ms apart
    expect(waits.map((w) => w === null)).toEqual([true, true, false, false]);
  });

  /** Two instances claimed by hand on a resource of cap 1: `a` holds its permit, `b` waits in line for it. */
  async function oneHoldsOneWaits() {
    const { db, engine, ids, start } = await idle(2);
    const [a, b] = ids as [string, string];
    const need = { scope: ENV, resource: `test:line:${crypto.randomUUID()}`, key: '', concurrency: 1, rate: null, burst: null, workflowWide: false };
    const held = new Map((await claimWorkflows(db.pool, { limit: 10, leaseMs: 60_000 })).map((s) => [s.instance.id, s]));
    const take = (id: string) => acquirePermits(db.pool, { id, token: held.get(id)!.leaseToken!, rowVersion: held.get(id)!.rowVersion, needs: [need] });
    expect((await take(a)).wait).toBeNull();
    expect((await take(b)).wait).not.toBeNull();
    return { db, engine, start, a, b };
  }

  it('a waiter woken for room is claimed before newcomers, however long they have been due', async () => {
    const { db, engine, start, a, b } = await oneHoldsOneWaits();
    // a backlog due for an hour
    const newcomers = await Promise.all([0, 1, 2].map(start));
    await asScheduler(db, (c) => c.query(`UPDATE workflows SET run_at = now() - interval '1 hour' WHERE id = ANY($1)`, [newcomers]));
    // a's attempt ends: its commit moved the row on, and its release wakes b
    await asScheduler(db, (c) => c.query(`UPDATE workflows SET row_version = row_version + 1, lease_token = NULL, state = 'completed' WHERE id = $1`, [a]));
    expect(await engine.permits.release({ id: a, ended: true })).toBe(1);
    const [first] = await claimWorkflows(db.pool, { limit: 1, leaseMs: 60_000 });
    expect(first!.instance.id).toBe(b);
  });

  it('a waiter is claimable at the instant it is woken: a claim in that same instant takes it', async () => {
    const { db, a, b } = await oneHoldsOneWaits();
    await asScheduler(db, (c) => c.query(`UPDATE workflows SET row_version = row_version + 1, lease_token = NULL, state = 'completed' WHERE id = $1`, [a]));
    // a's release wakes b, and a claim follows in the same instant: one message is one
    // statement_timestamp(), as two statements within one tick of PGlite's millisecond clock are
    const both = (await db.pool.query(`SELECT release_permits('${a}'::uuid, true) AS n; SELECT (c.wf).id FROM claim_workflows(10, 60000) c`)) as unknown as { rows: { n?: number; id?: string }[] }[];
    expect(both[0]!.rows[0]!.n).toBe(1);
    expect(both[1]!.rows.map((r) => r.id)).toContain(b);
  });

  it("a holder that dies keeps no permit: once its lease has expired the next waiter is woken and takes it", async () => {
    const { db, engine, start } = await idle(0);
    const a = await start();
    const b = await start();
    const need = { scope: ENV, resource: 'test:dies', key: '', concurrency: 1, rate: null, burst: null, workflowWide: false };
    const claimed = await claimWorkflows(db.pool, { limit: 10, leaseMs: 60_000 });
    const held = new Map(claimed.map((s) => [s.instance.id, s]));
    const sa = held.get(a)!;
    const sb = held.get(b)!;
    expect((await acquirePermits(db.pool, { id: a, token: sa.leaseToken!, rowVersion: sa.rowVersion, needs: [need] })).wait).toBeNull();
    const wait = await acquirePermits(db.pool, { id: b, token: sb.leaseToken!, rowVersion: sb.rowVersion, needs: [need] });
    expect(wait.wait).toEqual({ scope: ENV, resource: 'test:dies', wakeInMs: null });
    const parked = async () =>
      (await db.pool.query<{ parked: boolean }>(`SELECT lease_expires_at = 'infinity' AS parked FROM workflows WHERE id = $1`, [b])).rows[0]!.parked;
    expect(await parked()).toBe(true);
    // a sweep while a's lease is alive wakes nobody
    await engine.permits.sweep();
    expect(await parked()).toBe(true);
    // a's process dies: nobody releases; its lease runs out
    await asScheduler(db, (c) => c.query(`UPDATE workflows SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, [a]));
    await engine.permits.sweep();
    expect(await parked()).toBe(false);
    const again = (await claimWorkflows(db.pool, { limit: 10, leaseMs: 60_000 })).find((s) => s.instance.id === b)!;
    expect(again).toBeDefined();
    expect((await acquirePermits(db.pool, { id: b, token: again.leaseToken!, rowVersion: again.rowVersion, needs: [need] })).wait).toBeNull();
  });
});
