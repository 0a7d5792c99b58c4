import { afterAll, beforeAll, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { asScheduler, inEnv } from '../../engine/store/tx.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { OPERATOR, settle, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

const ENV = 'test-env';
const OTHER_ENV = 'other-env';
const SETTLED = { type: 'object', properties: { amount: { type: 'number' } }, required: ['amount'] };

let n = 0;
/** A fresh event type per test: triggers are per env, and the suite shares one. */
const eventType = () => `ledger.funds_settled.t${++n}`;

type Match = { correlationId: string } | { attribute: string; value: string };
const BY_PAYMENT: Match = { correlationId: 'event.payload.paymentId' };

/** Waits for funds.settled (routed from `type` by `match`), then captures the settled amount. */
const steps = (gated: boolean): Pick<LogicVersion, 'start' | 'steps'> => ({
  start: gated ? 'gate' : 'settled',
  steps: {
    ...(gated ? { gate: { kind: 'decision' as const, options: ['go'], next: 'settled' } } : {}),
    settled: { kind: 'waitFor', message: 'funds.settled', schema: SETTLED, next: 'capture' },
    capture: { kind: 'proxy', handler: 'test', path: '/capture', input: '{ "amount": steps.settled.amount }' },
  },
});
const routeOn = (type: string, match: Match = BY_PAYMENT) => ({ event: type, message: 'funds.settled', match, payload: '{ "amount": event.payload.amount }' });

describeEachDriver('events delivered to running instances by correlation', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  beforeAll(async () => {
    svc = await new FakeService().on('/capture', (req) => ({ status: 200, body: { captured: (req.body as { amount: number }).amount } })).listen();
    engine = new Engine({ db: getDb(), env: ENV, maxBufferedMessages: 2, executors: { handlers: new Map([['TEST', { url: svc.url }]]) } });
  });
  afterAll(() => svc.close());

  const start = async (logic: LogicVersion, correlationId: string | undefined, env = ENV, input: unknown = {}) => {
    const { id } = await engine.start({ logicId: logic.logicId, input, env, ...(correlationId === undefined ? {} : { correlationId }) });
    await settle(engine);
    return id;
  };
  const ingest = async (type: string, key: string, payload: unknown, env = ENV) => {
    const result = await engine.ingestEvent({ type, idempotencyKey: key, env, payload });
    await settle(engine);
    return result;
  };
  const messagesOf = async (id: string) =>
    (
      await asScheduler(getDb(), (c) =>
        c.query<{ state: string; idempotency_key: string }>('SELECT state, idempotency_key FROM workflow_messages WHERE workflow_id = $1 ORDER BY id', [id]),
      )
    ).rows;
  const capturedBy = (amount: number) => svc.calls('/capture').filter((c) => (c.body as { amount: number }).amount === amount).length;

  it('routes an event to the one instance whose correlationId matches, not another, not another env’s', async () => {
    const type = eventType();
    const logic = uniqueLogic({ ...steps(false), triggers: [routeOn(type)] });
    await engine.publish(logic, ENV);
    await engine.publish(logic, OTHER_ENV);
    const mine = await start(logic, 'pay-1');
    const other = await start(logic, 'pay-2');
    const elsewhere = await start(logic, 'pay-1', OTHER_ENV);

    const result = await ingest(type, 'ledger-1', { paymentId: 'pay-1', amount: 1250 });
    expect(result).toEqual({ ids: [], delivered: [{ workflowId: mine, message: 'funds.settled', status: 'delivered' }], created: true, matched: true });
    const done = await engine.get(mine, ENV);
    expect(done.state).toBe('completed');
    expect(done.steps.find((s) => s.step === 'settled')?.output).toEqual({ amount: 1250 });
    expect(capturedBy(1250)).toBe(1);
    expect((await engine.ops.audit(mine, { env: ENV })).map((a) => [a.verb, a.actor])).toEqual([['message', `event:${type}`]]);
    for (const [id, env] of [
      [other, ENV],
      [elsewhere, OTHER_ENV],
    ] as const) {
      expect((await engine.get(id, env)).state).toBe('waiting');
      expect(await messagesOf(id)).toEqual([]);
    }

    // an event that names no live instance is recorded and reaches none
    expect(await ingest(type, 'ledger-2', { paymentId: 'pay-9', amount: 1 })).toMatchObject({ delivered: [], matched: false });
  });

  it('routes by a search attribute, compared as the attribute is typed', async () => {
    const type = eventType();
    const logic = uniqueLogic({
      ...steps(false),
      attributes: { order: { type: 'number', value: 'input.order' } },
      triggers: [routeOn(type, { attribute: 'order', value: 'event.payload.order' })],
    });
    await engine.publish(logic, ENV);
    const mine = await start(logic, undefined, ENV, { order: 77 });
    const other = await start(logic, undefined, ENV, { order: 78 });

    const result = await ingest(type, 'ledger-attr', { order: 77, amount: 3 });
    expect(result.delivered).toEqual([{ workflowId: mine, message: 'funds.settled', status: 'delivered' }]);
    expect((await engine.get(mine, ENV)).state).toBe('completed');
    expect((await engine.get(other, ENV)).state).toBe('waiting');
  });

  it('does not reach another team’s definition: refused at publish, and a version recorded without the grant is skipped', async () => {
    const type = eventType();
    const ours = uniqueLogic({ ...steps(false), triggers: [routeOn(type)] });
    await engine.publish(ours, ENV);
    const theirs = makeLogic({
      logicId: `team-b.refund${n}`,
      domain: 'team-b',
      start: 'settled',
      steps: { settled: { kind: 'waitFor', message: 'funds.settled', schema: SETTLED } },
      triggers: [routeOn(type)],
    });
    const teamB = { subject: 'team-b-ci', scopes: ['flow:publish:team-b.*', 'flow:start:team-b.*'] };
    await expect(engine.publishVersion(ENV, theirs, {}, teamB)).rejects.toMatchObject({ code: 'FLOW_GRANT_EVENT' });

    // as a row published before grants were recorded (least privilege: no flow:events), written past the API
    await inEnv(getDb(), ENV, async (c) => {
      await c.query('INSERT INTO logic_versions (env_id, logic_id, version, hash, doc) VALUES ($1, $2, $3, $4, $5)', [
        ENV,
        theirs.logicId,
        theirs.version,
        theirs.hash,
        JSON.stringify(theirs),
      ]);
      await c.query('INSERT INTO triggers (env_id, event, logic_id) VALUES ($1, $2, $3)', [ENV, type, theirs.logicId]);
    });
    const mine = await start(ours, 'pay-7');
    const stranger = await start(theirs, 'pay-7');

    const result = await ingest(type, 'ledger-team', { paymentId: 'pay-7', amount: 7 });
    expect(result.delivered.map((d) => d.workflowId)).toEqual([mine]);
    expect((await engine.get(stranger, ENV)).state).toBe('waiting');
    expect(await messagesOf(stranger)).toEqual([]);
  });

  it('reaches the instances of every version with the trigger, a retired one included, each by its own version’s trigger', async () => {
    const type = eventType();
    const v1 = uniqueLogic({ ...steps(false), triggers: [routeOn(type)] });
    await engine.publish(v1, ENV);
    const old = await start(v1, 'pay-10');
    const v2 = makeLogic({ ...v1, version: 2, description: 'v2', triggers: [routeOn(type, { correlationId: 'event.payload.ref' })] });
    await engine.publish(v2, ENV);
    const current = await start(v2, 'pay-10');
    await engine.setVersionActive(ENV, v1.logicId, 1, false);

    // v1's trigger reads paymentId, v2's reads ref: each version's own trigger decides for its instances
    const result = await ingest(type, 'ledger-10', { paymentId: 'pay-10', ref: 'pay-11', amount: 10 });
    expect(result.delivered).toEqual([{ workflowId: old, message: 'funds.settled', status: 'delivered' }]);
    expect((await engine.get(old, ENV)).state).toBe('completed');
    expect((await engine.get(current, ENV)).state).toBe('waiting');
    expect((await ingest(type, 'ledger-11', { paymentId: 'pay-x', ref: 'pay-10', amount: 11 })).delivered.map((d) => d.workflowId)).toEqual([current]);
  });

  it('a redelivered event does not deliver twice: its key answers the first outcome, and each instance sees its message key again', async () => {
    const type = eventType();
    const logic = uniqueLogic({ ...steps(true), triggers: [routeOn(type)] });
    await engine.publish(logic, ENV);
    const id = await start(logic, 'pay-3');

    const first = await ingest(type, 'ledger-3', { paymentId: 'pay-3', amount: 30 });
    expect(first.delivered).toEqual([{ workflowId: id, message: 'funds.settled', status: 'buffered' }]);
    const again = await ingest(type, 'ledger-3', { paymentId: 'pay-3', amount: 30 });
    expect(again).toEqual({ ids: [], delivered: first.delivered, created: false, matched: true });
    expect(await messagesOf(id)).toEqual([{ state: 'buffered', idempotency_key: 'event:ledger-3:funds.settled' }]);

    // the event's record gone (as retention removes it), the same event is still a duplicate in the instance
    await inEnv(getDb(), ENV, (c) => c.query('DELETE FROM events WHERE idempotency_key = $1', ['ledger-3']));
    const late = await ingest(type, 'ledger-3', { paymentId: 'pay-3', amount: 30 });
    expect(late.delivered).toEqual([{ workflowId: id, message: 'funds.settled', status: 'buffered' }]);
    expect(await messagesOf(id)).toHaveLength(1);

    await engine.resume(id, { step: 'gate', option: 'go', approver: OPERATOR.actor }, { env: ENV });
    await settle(engine);
    expect((await engine.get(id, ENV)).state).toBe('completed');
    expect(capturedBy(30)).toBe(1);
  });

  it('an instance not yet at its waitFor step gets the message buffered, and takes it when it gets there', async () => {
    const type = eventType();
    const logic = uniqueLogic({ ...steps(true), triggers: [routeOn(type)] });
    await engine.publish(logic, ENV);
    const id = await start(logic, 'pay-4');
    expect((await engine.get(id, ENV)).currentStep).toBe('gate');

    const result = await ingest(type, 'ledger-4', { paymentId: 'pay-4', amount: 40 });
    expect(result.delivered).toEqual([{ workflowId: id, message: 'funds.settled', status: 'buffered' }]);
    expect((await engine.get(id, ENV)).currentStep).toBe('gate');
    expect(await messagesOf(id)).toEqual([{ state: 'buffered', idempotency_key: 'event:ledger-4:funds.settled' }]);

    await engine.resume(id, { step: 'gate', option: 'go', approver: OPERATOR.actor }, { env: ENV });
    await settle(engine);
    const done = await engine.get(id, ENV);
    expect(done.state).toBe('completed');
    expect(done.steps.find((s) => s.step === 'settled')?.output).toEqual({ amount: 40 });
    expect((await messagesOf(id)).map((m) => m.state)).toEqual(['consumed']);
  });

  it('a full buffer refuses that instance with its code and the event still reaches the others', async () => {
    const type = eventType();
    const logic = uniqueLogic({ ...steps(true), triggers: [routeOn(type)] });
    await engine.publish(logic, ENV);
    const full = await start(logic, 'pay-5');
    const roomy = await start(logic, 'pay-5');
    for (const key of ['a', 'b']) {
      await engine.deliverMessage(full, { name: 'funds.settled', payload: { amount: 0 }, key, sender: { subject: 'ledger', scopes: ['flow:signal'] } }, { env: ENV });
    }
    const result = await ingest(type, 'ledger-5', { paymentId: 'pay-5', amount: 50 });
    expect(result.delivered).toEqual(
      [
        { workflowId: full, message: 'funds.settled', status: 'refused', code: 'FLOW_MESSAGE_BUFFER_FULL' },
        { workflowId: roomy, message: 'funds.settled', status: 'buffered' },
      ].sort((a, b) => a.workflowId.localeCompare(b.workflowId)),
    );
  });

  it('a payload the waitFor step’s schema refuses refuses the event, recording and delivering nothing', async () => {
    const type = eventType();
    const logic = uniqueLogic({ ...steps(false), triggers: [routeOn(type)] });
    await engine.publish(logic, ENV);
    const id = await start(logic, 'pay-6');
    await expect(ingest(type, 'ledger-6', { paymentId: 'pay-6', amount: 'lots' })).rejects.toMatchObject({ code: 'FLOW_TRIGGER_ROUTE_INVALID', status: 422 });
    expect(await messagesOf(id)).toEqual([]);
    // not recorded: the same key with a good payload goes through
    expect((await ingest(type, 'ledger-6', { paymentId: 'pay-6', amount: 6 })).delivered).toHaveLength(1);
    expect((await engine.get(id, ENV)).state).toBe('completed');
  });

  it('a match or payload its expressions built that cannot be stored (a NUL) refuses the event with its code, never a 500', async () => {
    const type = eventType();
    const nulPayload = uniqueLogic({ ...steps(false), triggers: [{ ...routeOn(type), payload: '{ "amount": 1, "note": $decodeUrl("a%00b") }' }] });
    await engine.publish(nulPayload, ENV);
    await start(nulPayload, 'pay-8');
    await expect(ingest(type, 'ledger-8', { paymentId: 'pay-8', amount: 8 })).rejects.toMatchObject({ code: 'FLOW_TRIGGER_ROUTE_INVALID', status: 422 });
    const other = eventType();
    const nulMatch = uniqueLogic({ ...steps(false), triggers: [routeOn(other, { correlationId: '$decodeUrl("pay%00-9")' })] });
    await engine.publish(nulMatch, ENV);
    await expect(ingest(other, 'ledger-9', { paymentId: 'pay-9', amount: 9 })).rejects.toMatchObject({ code: 'FLOW_TRIGGER_ROUTE_INVALID', status: 422 });
  });

  it('a message trigger must name a message one of its waitFor steps takes', async () => {
    const bad = uniqueLogic({ ...steps(false), triggers: [{ ...routeOn(eventType()), message: 'funds.refunded' }] });
    await expect(engine.publish(bad, ENV)).rejects.toMatchObject({ code: 'FLOW_LOGIC_INVALID' });
    await expect(engine.publish(bad, ENV)).rejects.toMatchObject({ details: [expect.objectContaining({ code: 'FLOW_LV_UNKNOWN_MESSAGE', path: 'triggers.0.message' })] });
  });
});
