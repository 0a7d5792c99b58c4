import { afterAll, beforeAll, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import type { Engine } from '../../engine/runtime/engine.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle, testEngine, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

const ENV = 'test-env';
const APPROVER = { subject: 'alice', scopes: ['flow:decide'] };
const TO_INPUT = '{ "account": event.payload.id, "key": event.idempotencyKey, "type": event.type }';

let n = 0;
/** A fresh event type per test: triggers are per env, and the suite shares one. */
const eventType = () => `account.opened.t${++n}`;

describeEachDriver('event triggers', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  beforeAll(async () => {
    svc = await new FakeService().listen();
    engine = testEngine(getDb(), svc);
  });
  afterAll(() => svc.close());

  const ingest = (type: string, idempotencyKey: string, payload: unknown = { id: 'acc-1' }) =>
    engine.ingestEvent({ type, idempotencyKey, env: ENV, payload });
  const get = (id: string) => engine.get(id, ENV);
  const countOf = async (logicId: string) =>
    Number(
      (await asScheduler(getDb(), (c) => c.query<{ n: string }>('SELECT count(*) AS n FROM workflows WHERE logic_id = $1', [logicId]))).rows[0]!.n,
    );
  const onEvent = (type: string, steps: Pick<LogicVersion, 'steps' | 'start'> = { start: 'greet', steps: { greet: { kind: 'pass' } } }) =>
    uniqueLogic({ ...steps, triggers: [{ event: type, input: TO_INPUT }] });

  it('starts one instance per trigger on the event type, with input from the trigger expression', async () => {
    const type = eventType();
    const [a, b, other] = [onEvent(type), onEvent(type), onEvent(eventType())];
    for (const logic of [a, b, other]) await engine.publish(logic, ENV);

    const result = await ingest(type, 'evt-1');
    expect(result.created).toBe(true);
    expect(result.ids).toHaveLength(2);
    await settle(engine);
    const records = await Promise.all(result.ids.map(get));
    expect(records.map((r) => r.logicId).sort()).toEqual([a.logicId, b.logicId].sort());
    for (const r of records) {
      expect(r.input).toEqual({ account: 'acc-1', key: 'evt-1', type });
      expect(r.state).toBe('completed');
    }
    expect(await countOf(other.logicId)).toBe(0);
  });

  it('starts nothing new for a repeated idempotency key and answers with the first instances', async () => {
    const type = eventType();
    const logic = onEvent(type);
    await engine.publish(logic, ENV);

    const first = await ingest(type, 'evt-repeat');
    const again = await ingest(type, 'evt-repeat');
    expect(again).toEqual({ ids: first.ids, delivered: [], created: false, matched: true });
    expect(await countOf(logic.logicId)).toBe(1);
    await expect(ingest(type, 'evt-repeat', { id: 'another' })).rejects.toMatchObject({ code: 'FLOW_EVENT_KEY_REUSED' });
    expect(await countOf(logic.logicId)).toBe(1);
  });

  it('pins each started instance to the version active when its event arrived', async () => {
    const type = eventType();
    const parked = { start: 'approve', steps: { approve: { kind: 'decision' as const, options: ['ok'] } } };
    const v1 = onEvent(type, parked);
    await engine.publish(v1, ENV);
    const early = (await ingest(type, 'evt-v1')).ids[0]!;
    await settle(engine);
    expect(await get(early)).toMatchObject({ version: 1, logicHash: v1.hash, state: 'waiting' });

    const v2 = makeLogic({ ...parked, logicId: v1.logicId, version: 2, triggers: [{ event: type, input: TO_INPUT }], description: 'v2' });
    await engine.publish(v2, ENV);
    const late = (await ingest(type, 'evt-v2')).ids[0]!;
    expect(await get(late)).toMatchObject({ version: 2, logicHash: v2.hash });

    await engine.resume(early, { step: 'approve', option: 'ok', approver: APPROVER }, { env: ENV });
    await settle(engine);
    expect(await get(early)).toMatchObject({ version: 1, logicHash: v1.hash, state: 'completed' });
  });

  it('records an event of a type no trigger listens to, starts nothing, and says that nothing matched', async () => {
    const result = await ingest('nobody.listens', 'evt-unknown');
    expect(result).toEqual({ ids: [], delivered: [], created: true, matched: false });
    expect(await ingest('nobody.listens', 'evt-unknown')).toEqual({ ids: [], delivered: [], created: false, matched: false });
  });

  it('refuses an event whose trigger input does not fit the input schema, recording and starting nothing', async () => {
    const type = eventType();
    const strict = uniqueLogic({
      start: 'greet',
      steps: { greet: { kind: 'pass' } },
      input: { type: 'object', required: ['account'], properties: { account: { type: 'string' } } },
      triggers: [{ event: type, input: '{ "account": event.payload.id }' }],
    });
    const lenient = onEvent(type);
    await engine.publish(strict, ENV);
    await engine.publish(lenient, ENV);

    await expect(ingest(type, 'evt-bad', { id: 42 })).rejects.toMatchObject({ code: 'FLOW_TRIGGER_INPUT_INVALID' });
    expect(await countOf(strict.logicId)).toBe(0);
    expect(await countOf(lenient.logicId)).toBe(0);
    // nothing was recorded, so the same key goes through once the event is right
    expect((await ingest(type, 'evt-bad', { id: 'acc-9' })).ids).toHaveLength(2);
  });
});
