import { setImmediate as tick } from 'node:timers/promises';
import { expect, it } from 'vitest';
import { TERMINAL_STATES } from '../../contracts/index.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { IN_FLIGHT } from '../../engine/runtime/commit-batcher.ts';
import { advanceClock } from '../../engine/store/timers.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { gatedService } from '../support/fake-service.ts';
import { waitFor } from '../support/store-checks.ts';

const logic = makeLogic({ logicId: 'claims.gate', start: 's0', steps: { s0: { kind: 'proxy', path: '/gate' } } });

// Claim and heartbeat traffic proportional to work, not to workers. Every instance that
// finished used to ring the claim loop, and each ring cost a claim_workflows round trip, found work
// or not; every instance in flight kept a heartbeat timer of its own, one write transaction each.
describeEachDriver('a worker pool claims for work and beats once for all its leases', (getDb) => {
  /**
   * Ends what a test left unfinished (it failed, or stopped its engine first): the tests share a
   * schema, and the next test's engine would run those instances and count them as its own.
   */
  const endLeftOver = (ids: string[]) =>
    asScheduler(getDb(), (c) =>
      c.query(`UPDATE workflows SET state = 'cancelled', lease_token = NULL, lease_expires_at = NULL, run_at = 'infinity' WHERE id = ANY($1) AND state <> 'completed'`, [ids]),
    );

  it('instances finishing together send no claim when the last claim came back short', async () => {
    const N = 8;
    const { svc, open } = await gatedService('/gate');
    let ended = 0;
    const db = getDb();
    // a poll far beyond the test: every claim counted below was asked for by a wake-up
    const engine = new Engine({
      db,
      env: 'claims-env',
      executors: { handlers: new Map([['TEST', { url: svc.url }]]) },
      worker: { concurrency: 2 * N, pollMs: 600_000 },
      observer: { onTransition: (_f, t, ok) => void (ok && TERMINAL_STATES.has(t.instance.state) && ended++) },
    });
    await engine.publish(logic);
    for (let i = 0; i < N; i++) await engine.start({ logicId: logic.logicId, input: {} });
    await engine.workers.start();
    while (svc.calls('/gate').length < N) await tick();
    // the starts' notice (flow_work) rings the claim loop whenever it arrives: on a loaded box, it
    // came after the counting began (one claim counted, in a full run of the suites)
    await new Promise((r) => setTimeout(r, 300));
    for (let i = 0; i < 20; i++) await tick();

    let claims = 0;
    const query = db.pool.query.bind(db.pool);
    db.pool.query = ((...args: Parameters<typeof query>) => {
      if ((args[0] as { name?: string }).name === 'flow_claim') claims++;
      return query(...args);
    }) as typeof db.pool.query;
    open(); // all N answered at once: N commits, N instances finished
    while (ended < N || engine.workers.inflight > 0) await tick();
    for (let i = 0; i < 20; i++) await tick(); // let a rung claim loop send what it would
    db.pool.query = query as typeof db.pool.query;
    // closed before the check: an engine left running by a failed check claimed the next tests'
    // instances, and one miscount (CI, under load) failed the three tests after it too
    await engine.close();
    await svc.close();

    expect(claims).toBe(0);
  });

  it('one heartbeat statement extends every lease the pool holds', async () => {
    const N = 6;
    const { svc, open } = await gatedService('/gate');
    const db = getDb();
    const beats: unknown[][] = [];
    const connect = db.pool.connect.bind(db.pool);
    // heartbeats run in a scheduler transaction: watch what the checked-out clients send
    // (pool.query checks out with a callback: left alone, it sends no heartbeat)
    db.pool.connect = ((cb?: never) => (cb ? connect(cb) : watched())) as typeof db.pool.connect;
    const wrapped = new WeakSet<object>();
    const watched = async () => {
      const client = await connect();
      if (wrapped.has(client)) return client;
      wrapped.add(client);
      const query = client.query.bind(client) as (...a: unknown[]) => unknown;
      client.query = ((...args: unknown[]) => {
        const q = args[0] as { name?: string; text?: string; values?: unknown[] };
        if (/heartbeat/.test(`${q.name ?? ''} ${typeof q === 'string' ? q : (q.text ?? '')}`) && !/CREATE|DROP/.test(String(q.text ?? q))) beats.push(q.values ?? []);
        return query(...args);
      }) as typeof client.query;
      return client;
    };
    const engine = new Engine({
      db,
      env: 'beats-env',
      executors: { handlers: new Map([['TEST', { url: svc.url }]]) },
      worker: { concurrency: N, leaseMs: 300, pollMs: 600_000 }, // a beat every 100 ms
    });
    await engine.publish(logic);
    for (let i = 0; i < N; i++) await engine.start({ logicId: logic.logicId, input: {} });
    await engine.workers.start();
    while (svc.calls('/gate').length < N) await tick();
    const from = beats.length;
    while (beats.length < from + 3) await new Promise((r) => setTimeout(r, 20));
    open();
    await engine.close();
    db.pool.connect = connect as typeof db.pool.connect;
    await svc.close();
    // every beat while all N were in flight carried all N leases
    for (const values of beats.slice(from, from + 3)) expect((values[0] as string[]).length).toBe(N);
  });

  it('woken instances are claimed by the batch and their wake-ups committed together, while executors stay bounded', async () => {
    const { svc, open } = await gatedService('/gate');
    const db = getDb();
    const delayed = makeLogic({
      logicId: 'claims.woken',
      start: 'wait',
      steps: { wait: { kind: 'delay', duration: 'PT10M', next: 'gate' }, gate: { kind: 'proxy', path: '/gate' } },
    });
    const engine = new Engine({
      db,
      env: 'woken-env',
      executors: { handlers: new Map([['TEST', { url: svc.url }]]) },
      worker: { concurrency: 2, pollMs: 600_000 },
    });
    await engine.publish(delayed, 'woken-env');
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push((await engine.start({ logicId: delayed.logicId, input: {}, env: 'woken-env' })).id);
    await asScheduler(db, (c) => advanceClock(c, 11 * 60_000));
    // statements that carry commits, on the connections the batcher checks out
    let commitStatements = 0;
    const wrapped = new WeakSet<object>();
    db.pool.on('acquire', (client) => {
      if (wrapped.has(client)) return;
      wrapped.add(client);
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      client.query = ((config: string | { text: string }, ...rest: unknown[]) => {
        if (/commit_(batch|journaled)\(/.test(typeof config === 'string' ? config : config.text)) commitStatements++;
        return query(config, ...rest);
      }) as typeof client.query;
    });
    const woken = async () =>
      (await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM workflows WHERE id = ANY($1) AND current_step = 'gate'`, [ids])).rows[0]!.n;

    await engine.workers.start();
    try {
      // one claim takes the pool's two executors' worth and as many again in reserve: four wake-ups
      // applied at once, though only two calls may be out. The batcher sends the first IN_FLIGHT at
      // once, each alone (a workflow alone waits for nothing), so the others share one statement
      for (let waited = 0; (await woken()) < 4 && waited < 5000; waited += 20) await new Promise((r) => setTimeout(r, 20));
      expect(await woken()).toBe(4);
      expect(commitStatements).toBe(IN_FLIGHT + 1);
      // both executors' calls reach the service (on a loaded box, not within a fixed number of
      // turns of the loop), and no third follows while they are held
      await waitFor('two calls held at the gate', async () => (svc.calls('/gate').length >= 2 ? true : undefined));
      for (let i = 0; i < 20; i++) await tick();
      await new Promise((r) => setTimeout(r, 100));
      expect(svc.calls('/gate')).toHaveLength(2);

      open();
      while ((await db.pool.query(`SELECT 1 FROM workflows WHERE id = ANY($1) AND state <> 'completed'`, [ids])).rowCount! > 0) {
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(svc.calls('/gate')).toHaveLength(6);
    } finally {
      open();
      await engine.close();
      await svc.close();
      await endLeftOver(ids);
    }
  });
  /**
   * Six instances of one env parked on a timer that has fallen due, and a pool of two executors
   * holding nothing of that env, whose claim for it (room kept for every env) and whose timer poll
   * are out together, in the order `race` arranges: it sends each statement (`send`) and answers
   * it, and may ask for room for the env as a start or a notice would (`wakeEnv`). Returns how many
   * instances the pool then leased: two executors and as many again in reserve.
   */
  async function keptClaimBesidePoll(
    env: string,
    race: (name: string, send: () => Promise<unknown>, wakeEnv: () => void) => Promise<unknown>,
    /** The timers fall due once the pool runs, found by its own poll (every 200 ms), not at its start. */
    dueLater = false,
  ) {
    const { svc, open } = await gatedService('/gate');
    const db = getDb();
    const delayed = makeLogic({
      logicId: `claims.${env}`,
      start: 'wait',
      steps: { wait: { kind: 'delay', duration: 'PT10M', next: 'gate' }, gate: { kind: 'proxy', path: '/gate' } },
    });
    const engine = new Engine({ db, env, executors: { handlers: new Map([['TEST', { url: svc.url }]]) }, worker: { concurrency: 2, pollMs: dueLater ? 200 : 600_000 } });
    await engine.publish(delayed, env);
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push((await engine.start({ logicId: delayed.logicId, input: {}, env })).id);
    if (!dueLater) await asScheduler(db, (c) => advanceClock(c, 11 * 60_000));
    const query = db.pool.query.bind(db.pool);
    db.pool.query = ((...args: Parameters<typeof query>) =>
      race((args[0] as { name?: string }).name ?? '', () => query(...args) as unknown as Promise<unknown>, () => engine.workers.wake(env))) as typeof db.pool.query;
    try {
      await engine.workers.start();
      if (dueLater) {
        // after the claims at the pool's start, which found nothing due
        await new Promise((r) => setTimeout(r, 100));
        await asScheduler(db, (c) => advanceClock(c, 11 * 60_000));
      }
      await waitFor('four leased', async () => (engine.workers.inflight >= 4 ? true : undefined));
      for (let i = 0; i < 20; i++) await tick();
      await new Promise((r) => setTimeout(r, 400));
      return (await query<{ n: number }>(`SELECT count(*)::int AS n FROM workflows WHERE id = ANY($1) AND lease_token IS NOT NULL`, [ids])).rows[0]!.n;
    } finally {
      db.pool.query = query as typeof db.pool.query;
      open();
      await engine.close();
      await svc.close();
      await endLeftOver(ids);
    }
  }

  it('an env holding nothing is not claimed for while a timer poll out may be leasing its instances', async () => {
    // the poll that leased comes back late: its firing and leases committed, not yet counted by
    // the pool, when room is asked for the env
    const leased = await keptClaimBesidePoll(
      'kept-poll-first',
      async (name, send, wakeEnv) => {
        const res = await send();
        if (name === 'flow_fire_timers' && (res as { rows: { id: string | null }[] }).rows.some((r) => r.id !== null)) {
          wakeEnv();
          await new Promise((r) => setTimeout(r, 300));
        }
        return res;
      },
      true,
    );
    expect(leased).toBe(4);
  });

  it('a timer poll waits for a claim out for an env holding nothing', async () => {
    // the claim at the pool's start is slow to reach Postgres: a poll sent meanwhile would fire
    // and lease before it, and the claim then take one of the instances fired beyond the poll's room
    let first = true;
    const leased = await keptClaimBesidePoll('kept-claim-first', async (name, send) => {
      if (name === 'flow_claim' && first) {
        first = false;
        await new Promise((r) => setTimeout(r, 100));
      }
      return send();
    });
    expect(leased).toBe(4);
  });

  it('a timer poll leases the instances it wakes, as many as the pool has room for: fired and leased in one row version', async () => {
    const db = getDb();
    const delayed = makeLogic({
      logicId: 'claims.fire-lease',
      start: 'wait',
      steps: { wait: { kind: 'delay', duration: 'PT10M', next: 'done' }, done: { kind: 'pass', input: '"done"' } },
    });
    // the row version each woken instance reached this pool at, and the most held at once
    const versions: number[] = [];
    let mostHeld = 0;
    const engine: Engine = new Engine({
      db,
      env: 'fire-lease-env',
      worker: { concurrency: 2, pollMs: 600_000 },
      observer: {
        onWake: (_logic, stored) => {
          versions.push(stored.rowVersion);
          mostHeld = Math.max(mostHeld, engine.workers.inflight);
        },
      },
    });
    await engine.publish(delayed, 'fire-lease-env');
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push((await engine.start({ logicId: delayed.logicId, input: {}, env: 'fire-lease-env' })).id);
    await engine.workers.drain();
    const parked = await db.pool.query<{ v: string }>(`SELECT DISTINCT row_version::text AS v FROM workflows WHERE id = ANY($1)`, [ids]);
    expect(parked.rows).toHaveLength(1);
    const p = Number(parked.rows[0]!.v);
    await asScheduler(db, (c) => advanceClock(c, 11 * 60_000));

    // drain() polls first, with nothing held: room for 2 × concurrency. Those four come to the
    // pool at the version the firing wrote (its lease in the same row version); the other two
    // were woken as before and leased by a claim, one row version later
    await engine.workers.drain();
    expect(versions.sort((a, b) => a - b)).toEqual([p + 1, p + 1, p + 1, p + 1, p + 2, p + 2]);
    expect(mostHeld).toBeLessThanOrEqual(4);
    const done = await db.pool.query<{ state: string }>(`SELECT state FROM workflows WHERE id = ANY($1)`, [ids]);
    expect(done.rows.map((r) => r.state)).toEqual(Array(6).fill('completed'));
    await engine.close();
  });
});
