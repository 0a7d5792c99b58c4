import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Engine } from '../../engine/runtime/engine.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle, testEngine, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

describeEachDriver('listing stuck and dead-lettered instances', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  beforeAll(async () => {
    svc = await new FakeService()
      .on('/down', () => ({ status: 503 }))
      .on('/async', () => ({ status: 202, body: { status: 'waiting' } }))
      .listen();
    engine = testEngine(getDb(), svc);
  });
  afterAll(() => svc.close());

  async function start(logic: ReturnType<typeof uniqueLogic>) {
    await engine.publish(logic, 'test-env');
    return (await engine.start({ logicId: logic.logicId, input: { n: 1 }, env: 'test-env' })).id;
  }
  const sql = (text: string, params: unknown[]) => getDb().pool.query(text, params);

  it('lists dead-lettered instances with their context snapshot', async () => {
    const id = await start(uniqueLogic({ start: 'down', steps: { down: { kind: 'proxy', handler: 'test', path: '/down', retry: { maxAttempts: 1 } } } }));
    await settle(engine);
    const dead = (await engine.ops.listDeadLettered({ env: 'test-env' })).find((d) => d.id === id);
    expect(dead).toMatchObject({ reason: 'dead_lettered', currentStep: 'down', error: { code: 'HTTP_503' } });
    expect(dead?.ctx.attempts).toEqual({ down: 1 });
  });

  it('lists an instance whose worker lease expired, one waiting past its deadline, and one pending too long', async () => {
    const leased = await start(uniqueLogic({ start: 'down', steps: { down: { kind: 'proxy', handler: 'test', path: '/down' } } }));
    await sql(`UPDATE workflows SET state = 'processing', lease_token = gen_random_uuid(), lease_expires_at = now() - interval '1 minute' WHERE id = $1`, [leased]);
    const late = await start(uniqueLogic({ start: 'ask', steps: { ask: { kind: 'decision', options: ['ok'], deadline: 'PT1M' } } }));
    await sql(`UPDATE timers SET fire_at = now() - interval '1 minute' WHERE workflow_id = $1`, [late]);
    const queued = await start(uniqueLogic({ start: 'down', steps: { down: { kind: 'proxy', handler: 'test', path: '/down' } } }));
    await sql(`UPDATE workflows SET run_at = now() - interval '10 minutes' WHERE id = $1`, [queued]);

    const stuck = await engine.ops.listStuck({ env: 'test-env', pendingForMs: 5 * 60_000 });
    const reasons = Object.fromEntries(stuck.map((s) => [s.id, s.reason]));
    expect(reasons[leased]).toBe('lease_expired');
    expect(reasons[late]).toBe('deadline_passed');
    expect(reasons[queued]).toBe('pending_too_long');
  });

  it('names each reason precisely: a callback overdue, a delay overdue, a compensation left unclaimed', async () => {
    const parked = await start(uniqueLogic({ start: 'job', steps: { job: { kind: 'proxy', handler: 'test', path: '/async', timeoutMs: 1000 } } }));
    await settle(engine);
    expect((await engine.get(parked, 'test-env')).state).toBe('waiting');
    await sql(`UPDATE timers SET fire_at = now() - interval '1 minute' WHERE workflow_id = $1`, [parked]);
    const sleeping = await start(uniqueLogic({ start: 'nap', steps: { nap: { kind: 'delay', duration: 'PT1H' } } }));
    await sql(`UPDATE timers SET fire_at = now() - interval '1 minute' WHERE workflow_id = $1`, [sleeping]);
    const unwinding = await start(uniqueLogic({ start: 'down', steps: { down: { kind: 'proxy', handler: 'test', path: '/down' } } }));
    await sql(`UPDATE workflows SET state = 'compensating', run_at = now() - interval '10 minutes' WHERE id = $1`, [unwinding]);

    const stuck = await engine.ops.listStuck({ env: 'test-env', pendingForMs: 5 * 60_000 });
    const reasonsOf = (id: string) => stuck.filter((s) => s.id === id).map((s) => s.reason);
    expect(reasonsOf(parked)).toEqual(['callback_overdue']);
    expect(reasonsOf(sleeping)).toEqual(['delay_overdue']);
    expect(reasonsOf(unwinding)).toEqual(['pending_too_long']);
  });

  it('has one definition of stuck: the list filter selects exactly what listStuck lists, with the same reason', async () => {
    const unwinding = await start(uniqueLogic({ start: 'down', steps: { down: { kind: 'proxy', handler: 'test', path: '/down' } } }));
    await sql(`UPDATE workflows SET state = 'compensating', run_at = now() - interval '10 minutes' WHERE id = $1`, [unwinding]);
    const leased = await start(uniqueLogic({ start: 'down', steps: { down: { kind: 'proxy', handler: 'test', path: '/down' } } }));
    await sql(`UPDATE workflows SET state = 'processing', lease_token = gen_random_uuid(), lease_expires_at = now() - interval '1 minute' WHERE id = $1`, [leased]);

    const pendingForMs = 5 * 60_000;
    const stuck = await engine.ops.listStuck({ env: 'test-env', pendingForMs, limit: 1000 });
    const listed = await engine.ops.list({ stuck: true, pendingForMs }, { env: 'test-env', limit: 500 });
    expect(listed.map((l) => l.id).sort()).toEqual(stuck.map((s) => s.id).sort());
    expect(Object.fromEntries(listed.map((l) => [l.id, l.stuckReason]))).toEqual(Object.fromEntries(stuck.map((s) => [s.id, s.reason])));
    expect(listed.find((l) => l.id === unwinding)?.stuckReason).toBe('pending_too_long');
    // and a bulk job's filter selects the same set
    const selected = await engine.ops.select({ stuck: true, pendingForMs }, { env: 'test-env', limit: 1000 });
    expect(selected.map((r) => r.id).sort()).toEqual(stuck.map((s) => s.id).sort());
  });

  it('lists an instance parked on a 202 without timeoutMs once it has waited longer than parkedForMs', async () => {
    const parked = await start(uniqueLogic({ start: 'job', steps: { job: { kind: 'proxy', handler: 'test', path: '/async' } } }));
    await settle(engine);
    expect((await engine.get(parked, 'test-env')).state).toBe('waiting');
    const reasonOf = async () => (await engine.ops.listStuck({ env: 'test-env', parkedForMs: 60 * 60_000, limit: 1000 })).find((s) => s.id === parked)?.reason;
    expect(await reasonOf()).toBeUndefined();
    await sql(`UPDATE workflows SET updated_at = now() - interval '2 hours' WHERE id = $1`, [parked]);
    expect(await reasonOf()).toBe('callback_parked');
    // a decision without a deadline waits for a person, as long as it takes: never stuck for that
    const asking = await start(uniqueLogic({ start: 'ask', steps: { ask: { kind: 'decision', options: ['ok'] } } }));
    await sql(`UPDATE workflows SET updated_at = now() - interval '2 hours' WHERE id = $1`, [asking]);
    expect((await engine.ops.listStuck({ env: 'test-env', parkedForMs: 60 * 60_000, limit: 1000 })).some((s) => s.id === asking)).toBe(false);
  });

  it('filters a listing by parent', async () => {
    const child = uniqueLogic({ start: 'p', steps: { p: { kind: 'pass' } } });
    await engine.publish(child, 'test-env');
    const parent = await start(
      uniqueLogic({ start: 'fan', steps: { fan: { kind: 'children', logicId: child.logicId, items: '[1, 2, 3]', itemInput: '{ "n": item }', failurePolicy: 'all_settled' } } }),
    );
    await start(uniqueLogic({ start: 'p', steps: { p: { kind: 'pass' } } }));
    await settle(engine);
    const children = await engine.ops.list({ parent }, { env: 'test-env' });
    expect(children).toHaveLength(3);
    expect(children.every((c) => c.logicId === child.logicId)).toBe(true);
  });
});
