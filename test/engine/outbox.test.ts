import { createHmac } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { onOutcome } from '../../engine/core/flow.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { verifyOutbox } from '../../engine/runtime/outbox-signature.ts';
import { claimWorkflows } from '../../engine/store/claim-workflows.ts';
import { commitTransition } from '../../engine/store/commit-transition.ts';
import type { Db } from '../../engine/store/db.ts';
import { advanceClock } from '../../engine/store/timers.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { describeEachDriver } from '../support/db.ts';
import { OPERATOR, settle, uniqueLogic } from '../support/engine.ts';
import { FakeService, type Received } from '../support/fake-service.ts';

const ENV = 'test-env';
const SECRET = 'outbox-test-secret';
const DAY = 86_400_000;

interface OutboxRecord {
  kind: string;
  topic: string;
  payload: unknown;
  idempotency_key: string;
  url: string | null;
  attempts: number;
  delivered_at: Date | null;
  failed_at: Date | null;
  last_error: string | null;
  due: boolean;
}

/** The receiver's side of the scheme in docs/outbox.md, computed independently of the engine. */
function signatureValid(req: Received): boolean {
  const ts = req.headers['x-flow-timestamp'];
  const expected = `sha256=${createHmac('sha256', SECRET).update(`${ts}.${req.raw}`).digest('hex')}`;
  return ts !== undefined && req.headers['x-flow-signature'] === expected;
}

describeEachDriver('outbox: emit rows, callbacks and the relay', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  /** Per workflow id: the statuses the sink answers in turn (then 200). */
  const script = new Map<string, number[]>();

  beforeAll(async () => {
    const answer = (req: Received) => {
      // a receiver refuses what it cannot authenticate: a bad signature would fail the delivery
      if (!signatureValid(req)) return { status: 401, body: { message: 'bad signature' } };
      return { status: script.get(req.headers['x-flow-workflow-id'] ?? '')?.shift() ?? 200 };
    };
    svc = await new FakeService()
      .on('/capture', () => ({ status: 200, body: { captured: true } }))
      .on('/sink', answer)
      .on('/cb', answer)
      .listen();
    engine = new Engine({
      db: getDb(),
      env: ENV,
      executors: { handlers: new Map([['TEST', { url: svc.url }]]) },
      eventSink: { url: `${svc.url}/sink` },
      outboxSecret: SECRET,
      callbackAllowlist: [new URL(svc.url).host],
    });
  });
  afterAll(() => svc.close());

  const db = (): Db => getDb();
  const rows = async (workflowId: string, kind = 'event') =>
    (
      await asScheduler(db(), (c) =>
        c.query<OutboxRecord>(
          `SELECT kind, topic, payload, idempotency_key, url, attempts, delivered_at, failed_at, last_error,
                  next_attempt_at <= now() AS due
           FROM outbox WHERE workflow_id = $1 AND kind = $2 ORDER BY id`,
          [workflowId, kind],
        ),
      )
    ).rows;
  const callsFor = (path: string, id: string) => svc.calls(path).filter((r) => r.headers['x-flow-workflow-id'] === id);
  const advance = (ms: number) => asScheduler(db(), (c) => advanceClock(c, ms));

  const chargeThenAnnounce = () =>
    uniqueLogic({
      start: 'charge',
      steps: {
        charge: { kind: 'proxy', handler: 'test', path: '/capture', next: 'announce' },
        announce: { kind: 'emit', event: 'payment.captured', payload: '{ "amount": input.amount, "captured": steps.charge.captured }' },
      },
    });
  const announceOnly = () =>
    uniqueLogic({ start: 'announce', steps: { announce: { kind: 'emit', event: 'order.placed', payload: '{ "order": input.order }' } } });

  async function start(logic: ReturnType<typeof uniqueLogic>, input: unknown, extra: Record<string, unknown> = {}) {
    await engine.publish(logic, ENV);
    return (await engine.start({ logicId: logic.logicId, input, env: ENV, ...extra })).id;
  }

  it('writes the emit row in the commit of its step, and a fenced or refused transition writes none', async () => {
    const logic = chargeThenAnnounce();
    const id = await start(logic, { amount: 5 });
    const [claimed] = (await claimWorkflows(db().pool, { limit: 10, leaseMs: 60_000 })).filter((s) => s.instance.id === id);
    const t = await onOutcome(logic, claimed!.instance, { status: 'succeeded', output: { captured: true } });
    expect(t.commands).toContainEqual(expect.objectContaining({ type: 'outbox', topic: 'payment.captured' }));

    // an operator cancels while the worker runs the step: its transition is fenced out
    await engine.ops.cancel(id, { reason: 'stop' }, { ...OPERATOR, env: ENV });
    expect(await commitTransition(db(), claimed!, t, { keepLease: null })).toBe(false);
    // a transition outside the table is refused before anything is written
    const waiting = { ...claimed!, instance: { ...claimed!.instance, state: 'waiting' as const } };
    await expect(commitTransition(db(), waiting, t, { keepLease: null })).rejects.toMatchObject({ code: 'FLOW_TRANSITION_REFUSED' });
    expect(await rows(id)).toEqual([]);
    expect((await engine.get(id, ENV)).steps.map((s) => s.step)).toEqual(['charge']);

    const ok = await start(logic, { amount: 7 });
    await settle(engine);
    const record = await engine.get(ok, ENV);
    expect(record.state).toBe('completed');
    expect(record.steps.map((s) => [s.step, s.state])).toEqual([
      ['charge', 'succeeded'],
      ['announce', 'succeeded'],
    ]);
    expect(await rows(ok)).toEqual([
      expect.objectContaining({
        kind: 'event',
        topic: 'payment.captured',
        payload: { amount: 7, captured: true },
        idempotency_key: `${ok}:announce:0`,
        delivered_at: null,
      }),
    ]);
  });

  it('delivers an event to the sink with its idempotency key, workflow, env and a valid signature, once', async () => {
    const id = await start(announceOnly(), { order: 'o-1' });
    expect((await engine.get(id, ENV)).state).toBe('completed');
    await engine.outbox.drain();
    await engine.outbox.drain();

    const calls = callsFor('/sink', id);
    expect(calls).toHaveLength(1);
    const call = calls[0]!;
    expect(call.method).toBe('POST');
    expect(call.body).toEqual({ order: 'o-1' });
    expect(call.headers).toMatchObject({
      'idempotency-key': `${id}:announce:0`,
      'x-flow-event': 'order.placed',
      'x-flow-workflow-id': id,
      'x-flow-env': ENV,
    });
    expect(signatureValid(call)).toBe(true);
    const signed = { timestamp: call.headers['x-flow-timestamp'], signature: call.headers['x-flow-signature'] };
    expect(verifyOutbox(SECRET, { ...signed, body: call.raw })).toBe(true);
    expect(verifyOutbox(SECRET, { ...signed, body: call.raw.replace('o-1', 'o-X') })).toBe(false);
    expect(verifyOutbox('another-secret', { ...signed, body: call.raw })).toBe(false);
    const [row] = await rows(id);
    expect(row).toMatchObject({ attempts: 1, failed_at: null, last_error: null });
    expect(row!.delivered_at).toBeInstanceOf(Date);
  });

  it('retries a 503 after its backoff and then delivers once, under the same idempotency key', async () => {
    const id = await start(announceOnly(), { order: 'o-2' });
    script.set(id, [503]);
    await engine.outbox.relayOnce();
    let [row] = await rows(id);
    expect(row).toMatchObject({ attempts: 1, delivered_at: null, failed_at: null, due: false });
    expect(row!.last_error).toContain('HTTP_503');

    await engine.outbox.drain(); // not due yet: nothing is sent
    expect(callsFor('/sink', id)).toHaveLength(1);

    await advance(DAY);
    await engine.outbox.drain();
    const calls = callsFor('/sink', id);
    expect(calls.map((c) => c.headers['idempotency-key'])).toEqual([`${id}:announce:0`, `${id}:announce:0`]);
    expect(svc.applied.get(`${id}:announce:0`)).toBe(1);
    [row] = await rows(id);
    expect(row).toMatchObject({ attempts: 2, failed_at: null, last_error: null });
    expect(row!.delivered_at).toBeInstanceOf(Date);
  });

  it('marks a 400 failed at once, keeps the row and its error, and never retries it', async () => {
    const id = await start(announceOnly(), { order: 'o-3' });
    script.set(id, [400]);
    await engine.outbox.drain();
    await advance(DAY);
    await engine.outbox.drain();

    expect(callsFor('/sink', id)).toHaveLength(1);
    const [row] = await rows(id);
    expect(row).toMatchObject({ attempts: 1, delivered_at: null });
    expect(row!.failed_at).toBeInstanceOf(Date);
    expect(row!.last_error).toContain('HTTP_400');
  });

  it('writes a callback row with the transition that ends the instance, and delivers it to the callback URL', async () => {
    const callback = { url: `${svc.url}/cb` };
    const viaWorker = await start(uniqueLogic({ start: 'charge', steps: { charge: { kind: 'proxy', handler: 'test', path: '/capture' } } }), {}, { callback });
    const atStart = await start(uniqueLogic({ start: 'nope', steps: { nope: { kind: 'fail', code: 'NOPE' } } }), {}, { callback });
    const silent = await start(uniqueLogic({ start: 'charge', steps: { charge: { kind: 'proxy', handler: 'test', path: '/capture' } } }), {});

    // the first transition ended `atStart` already; `viaWorker` has not ended yet
    expect(await rows(viaWorker, 'callback')).toEqual([]);
    expect(await rows(atStart, 'callback')).toEqual([expect.objectContaining({ topic: 'workflow.failed', url: callback.url })]);
    await settle(engine);
    expect(await rows(silent, 'callback')).toEqual([]);

    const done = await engine.get(viaWorker, ENV);
    expect(done.state).toBe('completed');
    const [row] = await rows(viaWorker, 'callback');
    expect(row).toMatchObject({ kind: 'callback', topic: 'workflow.completed', url: callback.url, delivered_at: null });
    expect(row!.idempotency_key).toMatch(new RegExp(`^${viaWorker}:callback:\\d+$`));
    expect(row!.payload).toEqual({
      id: viaWorker,
      env: ENV,
      logicId: done.logicId,
      version: done.version,
      state: 'completed',
      output: { captured: true },
      error: null,
      correlationId: null,
      generation: 0,
    });

    await engine.outbox.drain();
    const [call] = callsFor('/cb', viaWorker);
    expect(call?.body).toEqual(row!.payload);
    expect(call?.headers).toMatchObject({ 'idempotency-key': row!.idempotency_key, 'x-flow-event': 'workflow.completed' });
    expect(signatureValid(call!)).toBe(true);
    expect(callsFor('/cb', atStart)[0]?.body).toMatchObject({ state: 'failed', error: { code: 'NOPE' } });
    expect((await rows(viaWorker, 'callback'))[0]!.delivered_at).toBeInstanceOf(Date);
  });

  it('refuses a start whose callback is not an http(s) URL', async () => {
    const logic = announceOnly();
    await engine.publish(logic, ENV);
    await expect(engine.start({ logicId: logic.logicId, input: {}, env: ENV, callback: { url: 'ftp://x' } })).rejects.toMatchObject({
      code: 'FLOW_BAD_REQUEST',
    });
  });

  it('refuses a callback to a host off the allowlist, and starts nothing', async () => {
    const logic = announceOnly();
    await engine.publish(logic, ENV);
    const before = await db().pool.query<{ n: number }>('SELECT count(*)::int AS n FROM workflows');
    const other = `http://localhost:${new URL(svc.url).port}/cb`;
    await expect(engine.start({ logicId: logic.logicId, input: {}, env: ENV, callback: { url: other } })).rejects.toMatchObject({
      code: 'FLOW_CALLBACK_HOST_NOT_ALLOWED',
      status: 403,
    });
    // with no allowlist configured, every callback is refused
    const closed = new Engine({ db: db(), env: ENV, outboxSecret: SECRET, callbackAllowlist: [] });
    await expect(closed.start({ logicId: logic.logicId, input: {}, env: ENV, callback: { url: `${svc.url}/cb` } })).rejects.toMatchObject({
      code: 'FLOW_CALLBACK_HOST_NOT_ALLOWED',
    });
    expect((await db().pool.query<{ n: number }>('SELECT count(*)::int AS n FROM workflows')).rows[0]!.n).toBe(before.rows[0]!.n);
  });

  it('will not sign with the development secret in production', () => {
    expect(() => new Engine({ db: db(), production: true, outboxSecret: SECRET })).toThrow(expect.objectContaining({ code: 'FLOW_SECRET_MISSING' }));
    expect(() => new Engine({ db: db(), production: true, tokenSecret: SECRET })).toThrow(/FLOW_OUTBOX_SECRET is not set/);
    expect(() => new Engine({ db: db(), production: true, tokenSecret: SECRET, outboxSecret: SECRET })).not.toThrow();
  });

  it('leaves event rows waiting while no event sink is configured, and still delivers callbacks', async () => {
    // callbacks are re-checked at delivery: the relaying engine lists the host too
    const noSink = new Engine({ db: db(), env: ENV, outboxSecret: SECRET, callbackAllowlist: [new URL(svc.url).host] });
    const id = await start(announceOnly(), { order: 'o-4' }, { callback: { url: `${svc.url}/cb` } });
    await noSink.outbox.drain();
    expect((await rows(id))[0]).toMatchObject({ delivered_at: null, failed_at: null, attempts: 0 });
    expect((await rows(id, 'callback'))[0]?.delivered_at).toBeInstanceOf(Date);
  });
});
