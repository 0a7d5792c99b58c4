import { afterEach, expect, it } from 'vitest';
import type { HandlerProfile } from '../../engine/executors/handlers.ts';
import { Allowances } from '../../engine/runtime/allowances.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { claimWorkflows } from '../../engine/store/claim-workflows.ts';
import { acquirePermits, lendAllowance, listWaiters, needsParam, type PermitNeed, returnAllowances } from '../../engine/store/permits.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { CountingService } from '../support/counting-service.ts';
import { closeTestDb, describeEachDriver, openTestDb } from '../support/db.ts';
import { callChain } from '../support/engine.ts';
import { waitFor } from '../support/store-checks.ts';

/**
 * Room a bucket lends an engine (migration 0053, runtime/allowances.ts): counted as taken wherever
 * room is counted, so a limit holds across a loan as it holds without one; and an engine with a
 * loan takes no permit in the database for the attempts it covers.
 */
const ENV = 'loans';

describeEachDriver('loans of room', (getDb, driver) => {
  const open: { engine: Engine; svc: CountingService }[] = [];
  /** Instances claimed by hand: ended after their test, so that no later test's engine runs them. */
  const byHand: string[] = [];
  afterEach(async () => {
    const ids = byHand.splice(0);
    if (ids.length > 0) {
      await asScheduler(getDb(), (c) =>
        c.query(`UPDATE workflows SET state = 'cancelled', lease_token = NULL, lease_expires_at = NULL, run_at = 'infinity' WHERE id = ANY($1)`, [ids]),
      );
    }
    for (const { engine, svc } of open.splice(0)) {
      svc.open();
      await engine.close();
      await svc.close();
    }
  });

  async function engineWith(limit: HandlerProfile['limit'], concurrency = 8) {
    const svc = await new CountingService().listen();
    const engine = new Engine({
      db: getDb(),
      env: ENV,
      executors: { handlers: new Map([['SVC', { url: svc.url, ...(limit ? { limit } : {}) }]]) },
      worker: { concurrency, pollMs: 3_600_000 },
      permitSweepMs: 0,
    });
    open.push({ engine, svc });
    return { svc, engine };
  }

  /** `n` idle instances of a one-call definition, claimed by hand, and a way to take permits for one of them. */
  async function claimed(n: number) {
    const { engine } = await engineWith(undefined);
    const db = engine.db;
    const logic = callChain(1);
    await engine.publish(logic, ENV);
    const ids: string[] = [];
    for (let i = 0; i < n; i++) ids.push((await engine.start({ env: ENV, logicId: logic.logicId, input: {} })).id);
    byHand.push(...ids);
    const held = new Map((await claimWorkflows(db.pool, { limit: 100, leaseMs: 60_000 })).map((s) => [s.instance.id, s]));
    const take = async (id: string, need: PermitNeed) => {
      const lease = held.get(id)!;
      return (await acquirePermits(db.pool, { id, token: lease.leaseToken!, rowVersion: lease.rowVersion, needs: [need] })).wait;
    };
    const parked = async (id: string) =>
      (await db.pool.query<{ parked: boolean }>(`SELECT lease_expires_at = 'infinity' AS parked FROM workflows WHERE id = $1`, [id])).rows[0]!.parked;
    // a resource of this test's own (the suite shares its database)
    const resource = `handler:T${crypto.randomUUID().slice(0, 8)}`;
    return { engine, db, ids, take, parked, resource };
  }

  const bucket = async (engine: Engine, resource: string) =>
    (
      await engine.db.pool.query<{ tokens: number; lent_slots: number; lent_tokens: number }>(
        'SELECT tokens, lent_slots, lent_tokens FROM limit_buckets WHERE resource = $1',
        [resource],
      )
    ).rows[0];

  it('slots lent are taken: an acquirer finds the cap less the loan, and is woken when the loan comes back', async () => {
    const { engine, db, ids, take, parked, resource } = await claimed(5);
    const need: PermitNeed = { scope: ENV, resource, key: '', concurrency: 6, rate: null, burst: null, workflowWide: false };
    const loan = await asScheduler(db, (c) => lendAllowance(c, { need, slots: 2, tokens: 1, ttlMs: 60_000 }));
    expect(loan).toMatchObject({ slots: 2, tokens: null });
    expect(await bucket(engine, resource)).toMatchObject({ lent_slots: 2 });
    // 6 less the 2 lent: four go, the fifth waits
    for (const id of ids.slice(0, 4)) expect(await take(id, need)).toBeNull();
    expect(await take(ids[4]!, need)).toEqual({ scope: ENV, resource, wakeInMs: null });
    expect(await parked(ids[4]!)).toBe(true);
    await asScheduler(db, (c) => returnAllowances(c, [loan!.id]));
    expect(await bucket(engine, resource)).toMatchObject({ lent_slots: 0 });
    expect(await parked(ids[4]!)).toBe(false);
  });

  it('tokens lent leave the bucket, and it refills only up to its burst less the loan', async () => {
    const { engine, db, ids, take, resource } = await claimed(7);
    const need: PermitNeed = { scope: ENV, resource, key: '', concurrency: null, rate: 1, burst: 10, workflowWide: false };
    // a full bucket of 10 lends 4 (it holds twice that): 6 left, 4 lent
    const loan = await asScheduler(db, (c) => lendAllowance(c, { need, slots: 1, tokens: 4, ttlMs: 60_000 }));
    expect(loan).toMatchObject({ slots: null, tokens: 4 });
    expect(await bucket(engine, resource)).toMatchObject({ tokens: 6, lent_tokens: 4 });
    // an hour later the bucket would hold its whole burst, but 4 of it are lent: 6 calls at once, not 10
    await asScheduler(db, (c) => c.query(`UPDATE limit_buckets SET refilled_at = refilled_at - interval '1 hour' WHERE resource = $1`, [resource]));
    for (const id of ids.slice(0, 6)) expect(await take(id, need)).toBeNull();
    expect((await take(ids[6]!, need))?.wakeInMs).toBeGreaterThan(0);
  });

  it('nothing is lent where it would leave the limit close to reached, or someone waits', async () => {
    const { db, ids, take, resource } = await claimed(2);
    const lend = (need: PermitNeed, slots: number, tokens: number) => asScheduler(db, (c) => lendAllowance(c, { need, slots, tokens, ttlMs: 60_000 }));
    const capped: PermitNeed = { scope: ENV, resource, key: '', concurrency: 8, rate: null, burst: null, workflowWide: false };
    // more than half the cap once lent
    expect(await lend(capped, 5, 1)).toBeNull();
    expect(await lend(capped, 4, 1)).not.toBeNull();
    // the 4 lent are half of it: nothing more
    expect(await lend(capped, 1, 1)).toBeNull();
    const rated: PermitNeed = { scope: ENV, resource: `${resource}r`, key: '', concurrency: null, rate: 1, burst: 10, workflowWide: false };
    expect(await lend(rated, 1, 6)).toBeNull();
    const tight: PermitNeed = { scope: ENV, resource: `${resource}t`, key: '', concurrency: 1, rate: null, burst: null, workflowWide: false };
    expect(await take(ids[0]!, tight)).toBeNull();
    expect(await take(ids[1]!, tight)).not.toBeNull();
    const widened = { ...tight, concurrency: 100 };
    // room to spare now, but one waits in line: a loan would go before it
    expect(await lend(widened, 2, 1)).toBeNull();
  });

  it('a commit batch finds room to spare only beside what is lent', async () => {
    const { db, resource } = await claimed(0);
    // a batch goes without locking its buckets where 128 more than it takes would still fit
    const need: PermitNeed = { scope: ENV, resource, key: '', concurrency: 145, rate: null, burst: null, workflowWide: false };
    const slack = async () =>
      (await asScheduler(db, (c) => c.query<{ buckets: unknown }>('SELECT buckets FROM permits_slack($1)', [JSON.stringify([{ permits: needsParam([need]) }])]))).rows[0]!.buckets;
    expect(await asScheduler(db, (c) => lendAllowance(c, { need, slots: 16, tokens: 1, ttlMs: 60_000 }))).not.toBeNull();
    // 1 + 128 + the 16 lent fit in 145
    expect(await slack()).not.toBeNull();
    need.concurrency = 144;
    expect(await slack()).toBeNull();
  });

  it('a batch is refused room a loan took since it was offered, and the bucket refills only to its burst less the loan', async () => {
    const { engine, db, resource } = await claimed(0);
    const rated: PermitNeed = { scope: ENV, resource, key: '', concurrency: null, rate: 100, burst: 100, workflowWide: false };
    const capped: PermitNeed = { ...rated, resource: `${resource}c`, concurrency: 40, rate: null, burst: null };
    expect(await asScheduler(db, (c) => lendAllowance(c, { need: rated, slots: 1, tokens: 25, ttlMs: 60_000 }))).toMatchObject({ tokens: 25 });
    expect(await asScheduler(db, (c) => lendAllowance(c, { need: capped, slots: 8, tokens: 1, ttlMs: 60_000 }))).toMatchObject({ slots: 8 });
    // what commit_batch() sends take_slack() for `taken` permits of a bucket offered with this cap
    const takeSlack = (r: string, cap: number | null, taken: number) =>
      asScheduler(db, (c) =>
        c.query(
          `SELECT take_slack(jsonb_build_array(jsonb_build_object('s', env_id, 'r', resource, 'k', key, 'cap', $2::int, 'rate', $3::float8, 'burst', $4::int, 'changed', limit_changed_at)), $5::jsonb)
           FROM limit_buckets WHERE resource = $1`,
          [r, cap, cap === null ? 100 : null, cap === null ? 100 : null, JSON.stringify(Array.from({ length: taken }, () => ({ s: ENV, r, k: '' })))],
        ),
      );
    // 75 left and 25 lent: 50 ms later the bucket would hold 80, but no more than 100 - 25 while the loan stands
    await new Promise((r) => setTimeout(r, 50));
    await expect(takeSlack(resource, null, 76)).rejects.toMatchObject({ code: '40001' });
    await takeSlack(resource, null, 10);
    expect(await bucket(engine, resource)).toMatchObject({ tokens: 65, lent_tokens: 25 });
    // a batch offered room under a cap of 7, with 8 lent since: none left
    await expect(takeSlack(capped.resource, 7, 1)).rejects.toMatchObject({ code: '40001' });
    await takeSlack(capped.resource, 9, 1);
  });

  it('a loan its engine cannot keep lapses by the engine\'s own clock, before Postgres takes it back', async () => {
    const db = getDb();
    // a partition from Postgres, as this engine sees it: no connection can be had
    const cut = { on: false };
    const pool = new Proxy(db.pool, {
      get(target, prop) {
        if (prop === 'connect' && cut.on) return () => Promise.reject(new Error('partitioned from Postgres'));
        const v = Reflect.get(target, prop, target);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    const errors: unknown[] = [];
    const allowances = new Allowances({ pool, schema: db.schema, driver: db.driver, listen: db.listen.bind(db), close: async () => {} }, 2, (e) => errors.push(e), 1200);
    allowances.start();
    const resource = `handler:L${crypto.randomUUID().slice(0, 8)}`;
    const need: PermitNeed = { scope: ENV, resource, key: '', concurrency: null, rate: 1000, burst: 1000, workflowWide: false };
    expect(allowances.allot([need])).toBeNull();
    const inFlight = await waitFor('the loan', async () => allowances.allot([need]) ?? undefined);
    // kept while Postgres answers: past its first 1,200 ms it still hands out
    await new Promise((r) => setTimeout(r, 1300));
    allowances.allot([need])!.release();
    cut.on = true;
    // its upkeep (every 200 ms) cannot keep it; 1,200 ms on, it hands out nothing more
    await new Promise((r) => setTimeout(r, 1300));
    expect(allowances.allot([need])).toBeNull();
    expect(errors.length).toBeGreaterThan(0);
    // Postgres still counts it lent: the engine stopped first
    expect((await db.pool.query('SELECT lent_tokens FROM limit_buckets WHERE resource = $1', [resource])).rows[0]).toMatchObject({ lent_tokens: 250 });
    cut.on = false;
    inFlight.release();
    await allowances.stop();
    await waitFor('the loan given back', async () => ((await db.pool.query('SELECT lent_tokens FROM limit_buckets WHERE resource = $1', [resource])).rows[0]?.lent_tokens === 0 ? true : undefined));
  });

  it('a loan its engine left to expire is taken back by the sweep, and its room offered to who waits', async () => {
    const { engine, db, ids, take, parked, resource } = await claimed(3);
    const need: PermitNeed = { scope: ENV, resource, key: '', concurrency: 4, rate: null, burst: null, workflowWide: false };
    expect(await asScheduler(db, (c) => lendAllowance(c, { need, slots: 2, tokens: 1, ttlMs: 1 }))).not.toBeNull();
    // expired or not, a loan is counted until it is taken back
    expect(await take(ids[0]!, need)).toBeNull();
    expect(await take(ids[1]!, need)).toBeNull();
    expect(await take(ids[2]!, need)).toEqual({ scope: ENV, resource, wakeInMs: null });
    // the engine that borrowed died: nobody keeps its loan, which has expired
    await new Promise((r) => setTimeout(r, 5));
    await engine.permits.sweep();
    expect(await bucket(engine, resource)).toMatchObject({ lent_slots: 0 });
    expect(await parked(ids[2]!)).toBe(false);
  });

  it('an engine with a loan takes no permit in the database for the attempts it covers, and gives the loan back at stop', async () => {
    const { svc, engine } = await engineWith({ concurrency: 1000, rate: 100_000, burst: 100_000 });
    const logic = callChain(5);
    await engine.publish(logic, ENV);
    await engine.workers.start();
    // the first instance's attempts ask for the loan
    const first = (await engine.start({ env: ENV, logicId: logic.logicId, input: {} })).id;
    await waitFor('the loan', async () => ((await bucket(engine, 'handler:SVC'))?.lent_slots ? true : undefined));
    await waitFor('the first instance ended', async () => ((await engine.get(first, ENV)).state === 'completed' ? true : undefined));
    const written = await notePermitWrites(engine);
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push((await engine.start({ env: ENV, logicId: logic.logicId, input: {} })).id);
    await waitFor('every instance ended', async () => {
      const res = await engine.db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM workflows WHERE id = ANY($1) AND state = 'completed'`, [ids]);
      return Number(res.rows[0]!.n) === ids.length ? true : undefined;
    });
    expect(svc.calls('/call')).toHaveLength(35);
    // no permit row, and no token taken from the bucket: the loan covered every attempt
    expect(await written()).toBe(0);
    expect(await bucket(engine, 'handler:SVC')).toMatchObject({ lent_slots: 16 });
    await engine.workers.stop();
    expect(await bucket(engine, 'handler:SVC')).toMatchObject({ lent_slots: 0, lent_tokens: 0 });
    expect((await engine.db.pool.query(`SELECT 1 FROM limit_allowances WHERE resource = 'handler:SVC'`)).rows).toHaveLength(0);
  });

  it.skipIf(driver === 'pglite')('engines on one database: what one borrowed, another cannot take, until it is given back', async () => {
    // its own store: two engines and the test's reads need more connections than the suite's
    const db = await openTestDb('postgres', { poolSize: 30 });
    const svcA = await new CountingService().listen();
    const svcC = await new CountingService().listen();
    const limit = { concurrency: 32, rate: null, burst: null };
    const engineOn = (svc: CountingService, concurrency: number) =>
      new Engine({ db, env: ENV, executors: { handlers: new Map([['SVC', { url: svc.url, limit }]]) }, worker: { concurrency, pollMs: 3_600_000 }, permitSweepMs: 0 });
    // A holds at most 8 instances: a cap of 32 lends it 8 slots; C's 40 executors are too many to lend to
    const a = engineOn(svcA, 4);
    const c = engineOn(svcC, 40);
    try {
      const logic = callChain(1);
      await a.publish(logic, ENV);
      const start = (e: Engine) => e.start({ env: ENV, logicId: logic.logicId, input: {} }).then((r) => r.id);
      svcA.hold();
      svcC.hold();
      await a.workers.start();
      // A's first call takes a permit row and asks for the loan; the next three go under the loan
      const first = await start(a);
      await waitFor('the loan', async () => ((await bucket(a, 'handler:SVC'))?.lent_slots === 8 ? true : undefined));
      const ids = [first];
      for (let i = 0; i < 3; i++) ids.push(await start(a));
      await waitFor('four calls in flight from A', async () => (svcA.inFlight === 4 ? true : undefined));
      await c.workers.start();
      for (let i = 0; i < 40; i++) ids.push(await start(c));
      // 32, less the 8 lent to A and A's one permit row: 23 go, 17 wait
      await waitFor('23 calls in flight from C and 17 waiting', async () => {
        const waiting = await asScheduler(db, (q) => listWaiters(q, { env: ENV, limit: 100 }));
        return svcC.inFlight === 23 && waiting.length === 17 ? true : undefined;
      });
      // A ends its calls and stops: the loan goes back, and C's waiters are woken for its room
      svcA.open();
      await a.workers.stop();
      await waitFor('32 calls in flight from C', async () => (svcC.inFlight === 32 ? true : undefined));
      svcC.open();
      await waitFor('every instance ended', async () => {
        const res = await db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM workflows WHERE id = ANY($1) AND state = 'completed'`, [ids]);
        return Number(res.rows[0]!.n) === ids.length ? true : undefined;
      });
      expect(svcC.maxInFlight).toBe(32);
    } finally {
      svcA.open();
      svcC.open();
      await a.close();
      await c.close();
      await svcA.close();
      await svcC.close();
      await closeTestDb(db);
    }
  });

  it('a limit lowered while attempts run under a loan: the loan hands out nothing more, and the lower limit holds', async () => {
    const { svc, engine } = await engineWith({ concurrency: 1000, rate: null, burst: null });
    const logic = callChain(3);
    await engine.publish(logic, ENV);
    await engine.workers.start();
    const first = (await engine.start({ env: ENV, logicId: logic.logicId, input: {} })).id;
    await waitFor('the loan', async () => ((await bucket(engine, 'handler:SVC'))?.lent_slots ? true : undefined));
    await waitFor('the first instance ended', async () => ((await engine.get(first, ENV)).state === 'completed' ? true : undefined));
    svc.hold();
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push((await engine.start({ env: ENV, logicId: logic.logicId, input: {} })).id);
    // all four at their first call, under the loan
    await waitFor('four calls in flight', async () => (svc.inFlight === 4 ? true : undefined));
    // through this engine: it has heard of the change once this returns (another engine hears the notice)
    const override = (limit: { concurrency: number; rate: null; burst: null } | null) =>
      engine.permits.set({ scope: '*', resource: 'handler:SVC', limit, actor: 'ops', reason: 'a test' });
    await override({ concurrency: 1, rate: null, burst: null });
    try {
      // from here on, a call starts only where no other is in flight
      svc.maxInFlight = 0;
      svc.open();
      await waitFor('every instance ended', async () => {
        const res = await engine.db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM workflows WHERE id = ANY($1) AND state = 'completed'`, [ids]);
        return Number(res.rows[0]!.n) === ids.length ? true : undefined;
      });
      expect(svc.calls('/call')).toHaveLength(15);
      expect(svc.maxInFlight).toBe(1);
    } finally {
      await override(null);
    }
  });
});

/** Counts the rows written to `permits` and `limit_buckets` from now on (triggers of the test's schema). */
async function notePermitWrites(engine: Engine): Promise<() => Promise<number>> {
  const { pool, schema } = engine.db;
  await pool.query('CREATE TABLE IF NOT EXISTS permit_notes (tbl text NOT NULL)');
  await pool.query(
    `CREATE OR REPLACE FUNCTION note_permit_write() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = ${schema} AS $$
     BEGIN INSERT INTO permit_notes VALUES (TG_TABLE_NAME); RETURN NEW; END $$`,
  );
  for (const table of ['permits', 'limit_buckets']) {
    await pool.query(`DROP TRIGGER IF EXISTS permit_noted ON ${table}`);
    await pool.query(`CREATE TRIGGER permit_noted AFTER INSERT OR UPDATE ON ${table} FOR EACH ROW EXECUTE FUNCTION note_permit_write()`);
  }
  const count = async () => Number((await pool.query<{ n: string }>('SELECT count(*) AS n FROM permit_notes')).rows[0]!.n);
  const from = await count();
  return async () => (await count()) - from;
}
