import { afterAll, beforeAll, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { exportTrace, replay } from '../../engine/testing/index.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { describeEachDriver } from '../support/db.ts';
import { advance, OPERATOR, settle, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

const SENDER = { subject: 'ledger', scopes: ['flow:signal'] };
const SETTLED = { type: 'object', properties: { amount: { type: 'number' } }, required: ['amount'] };

describeEachDriver('messages to running instances', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  beforeAll(async () => {
    svc = await new FakeService().on('/capture', (req) => ({ status: 200, body: { captured: (req.body as { amount: number }).amount } })).listen();
    engine = new Engine({ db: getDb(), env: 'test-env', maxBufferedMessages: 3, executors: { handlers: new Map([['TEST', { url: svc.url }]]) } });
  });
  afterAll(() => svc.close());

  async function start(logic: LogicVersion, input: unknown = {}) {
    await engine.publish(logic, 'test-env');
    const { id } = await engine.start({ logicId: logic.logicId, input, env: 'test-env' });
    await settle(engine);
    return id;
  }
  const get = (id: string) => engine.get(id, 'test-env');
  const send = async (id: string, name: string, payload: unknown, key: string) => {
    const answer = await engine.deliverMessage(id, { name, payload: payload as never, key, sender: SENDER }, { env: 'test-env' });
    await settle(engine);
    return answer;
  };
  const refusal = (id: string, name: string, payload: unknown, key = `k-${Math.random()}`) =>
    engine.deliverMessage(id, { name, payload: payload as never, key, sender: SENDER }, { env: 'test-env' }).then(
      () => null,
      (err: { code: string; status?: number }) => ({ code: err.code, status: err.status }),
    );
  const buffered = async (id: string) =>
    (
      await asScheduler(getDb(), (c) =>
        c.query<{ name: string; payload: unknown }>(`SELECT name, payload FROM workflow_messages WHERE workflow_id = $1 AND state = 'buffered' ORDER BY id`, [id]),
      )
    ).rows;

  /** Parks on funds.settled, then captures the settled amount. */
  const settlement = (extra: Record<string, unknown> = {}) =>
    uniqueLogic({
      start: 'settled',
      steps: {
        settled: { kind: 'waitFor', message: 'funds.settled', schema: SETTLED, next: 'capture', ...extra },
        capture: { kind: 'proxy', handler: 'test', path: '/capture', input: '{ "amount": steps.settled.amount }' },
        ...('onError' in extra ? { late: { kind: 'pass' as const, input: '{ "late": steps.settled.error.code }' } } : {}),
      },
    });
  /** A decision first, so messages can arrive before the waitFor steps are reached. */
  const gated = () =>
    uniqueLogic({
      start: 'gate',
      steps: {
        gate: { kind: 'decision', options: ['go'], next: 'first' },
        first: { kind: 'waitFor', message: 'item', next: 'second' },
        second: { kind: 'waitFor', message: 'item', next: 'other' },
        other: { kind: 'waitFor', message: 'other', next: 'out' },
        out: { kind: 'pass', input: '[steps.first, steps.second, steps.other]' },
      },
      output: 'steps.out',
    });
  const go = (id: string) => engine.resume(id, { step: 'gate', option: 'go', approver: OPERATOR.actor }, { env: 'test-env' });

  it('a waitFor step parks; the delivery hands it the payload, which is its output, and the instance runs on', async () => {
    const id = await start(settlement());
    expect((await get(id)).state).toBe('waiting');
    const answer = await send(id, 'funds.settled', { amount: 42 }, 'settle-1');
    expect(answer).toEqual({ status: 200, body: { workflowId: id, message: 'funds.settled', status: 'delivered' } });
    const done = await get(id);
    expect(done.state).toBe('completed');
    expect(done.steps.find((s) => s.step === 'settled')?.output).toEqual({ amount: 42 });
    expect(svc.calls('/capture').at(-1)?.body).toEqual({ amount: 42 });
    expect((await engine.ops.audit(id, { env: 'test-env' })).map((a) => [a.verb, a.actor])).toEqual([['message', 'ledger']]);
  });

  it('a message sent before its step is reached is buffered, and buffered messages are taken in arrival order per name', async () => {
    const id = await start(gated());
    expect((await send(id, 'item', { n: 1 }, 'a')).status).toBe(202);
    expect((await send(id, 'other', { n: 'x' }, 'b')).status).toBe(202);
    expect((await send(id, 'item', { n: 2 }, 'c')).status).toBe(202);
    expect((await buffered(id)).map((m) => m.name)).toEqual(['item', 'other', 'item']);
    await go(id);
    await settle(engine);
    const done = await get(id);
    expect(done.state).toBe('completed');
    expect(done.output).toEqual([{ n: 1 }, { n: 2 }, { n: 'x' }]);
    expect(await buffered(id)).toEqual([]);
  });

  it('a repeated Idempotency-Key is answered with the first answer and changes nothing', async () => {
    const id = await start(gated());
    const first = await send(id, 'item', { n: 1 }, 'same');
    expect(first.status).toBe(202);
    // the same key again, even with another payload: the first answer, nothing buffered twice
    expect(await send(id, 'item', { n: 99 }, 'same')).toEqual(first);
    expect(await buffered(id)).toEqual([{ name: 'item', payload: { n: 1 } }]);
    await go(id);
    await settle(engine);
    expect((await get(id)).currentStep).toBe('second');
    const delivered = await send(id, 'item', { n: 2 }, 'then');
    expect(delivered.status).toBe(200);
    await settle(engine);
    expect(await send(id, 'item', { n: 3 }, 'then')).toEqual(delivered);
    expect((await get(id)).currentStep).toBe('other');
  });

  it('beyond the per-instance bound a message is refused FLOW_MESSAGE_BUFFER_FULL', async () => {
    const id = await start(gated());
    for (const key of ['1', '2', '3']) expect((await send(id, 'item', {}, key)).status).toBe(202);
    expect(await refusal(id, 'item', {})).toEqual({ code: 'FLOW_MESSAGE_BUFFER_FULL', status: 409 });
    expect(await buffered(id)).toHaveLength(3);
  });

  it('refuses an unknown message name and a payload that breaks the schema, changing nothing', async () => {
    const id = await start(settlement());
    const before = await get(id);
    expect(await refusal(id, 'funds.sent', { amount: 1 })).toEqual({ code: 'FLOW_UNKNOWN_MESSAGE', status: 422 });
    expect(await refusal(id, 'funds.settled', { amount: 'lots' })).toEqual({ code: 'FLOW_MESSAGE_PAYLOAD_INVALID', status: 422 });
    expect(await refusal(id, 'funds.settled', {})).toEqual({ code: 'FLOW_MESSAGE_PAYLOAD_INVALID', status: 422 });
    expect(await get(id)).toEqual(before);
    expect(await buffered(id)).toEqual([]);
    // a refused key is not spent: the same key with a good payload is delivered
    expect(await refusal(id, 'funds.settled', { amount: 'x' }, 'k')).toEqual({ code: 'FLOW_MESSAGE_PAYLOAD_INVALID', status: 422 });
    expect((await send(id, 'funds.settled', { amount: 1 }, 'k')).status).toBe(200);
  });

  it('refuses a message to an ended instance with FLOW_INSTANCE_ENDED; what it never took is set aside as unread', async () => {
    const id = await start(gated());
    expect((await send(id, 'item', { n: 1 }, 'early')).status).toBe(202);
    await engine.ops.cancel(id, { reason: 'customer withdrew' }, { ...OPERATOR, env: 'test-env' });
    expect(await refusal(id, 'item', { n: 2 })).toEqual({ code: 'FLOW_INSTANCE_ENDED', status: 409 });
    await settle(engine);
    const rows = await asScheduler(getDb(), (c) => c.query<{ state: string }>('SELECT state FROM workflow_messages WHERE workflow_id = $1', [id]));
    expect(rows.rows).toEqual([{ state: 'unread' }]);
  });

  it('a timeout takes onError with FLOW_MESSAGE_TIMEOUT; without onError the workflow fails', async () => {
    const routed = await start(settlement({ timeout: 'PT1H', onError: 'late' }));
    const bare = await start(settlement({ timeout: 'PT1H' }));
    await advance(engine, 59 * 60_000);
    expect((await get(routed)).state).toBe('waiting');
    await advance(engine, 2 * 60_000);
    const r = await get(routed);
    expect(r.state).toBe('completed');
    expect(r.steps.find((s) => s.step === 'late')?.output).toEqual({ late: 'FLOW_MESSAGE_TIMEOUT' });
    const b = await get(bare);
    expect(b.state).toBe('failed');
    expect(b.error?.code).toBe('FLOW_MESSAGE_TIMEOUT');
    expect(await refusal(bare, 'funds.settled', { amount: 1 })).toEqual({ code: 'FLOW_INSTANCE_ENDED', status: 409 });
  });

  it('a message left buffered while its instance parked on the step (a race, or a crash before the hand-over) is handed over by the sweep', async () => {
    const id = await start(settlement());
    expect((await get(id)).state).toBe('waiting');
    // as a delivery that committed while a worker still held the instance, after it read the buffer
    await asScheduler(getDb(), (c) =>
      c.query(
        `INSERT INTO workflow_messages (env_id, workflow_id, idempotency_key, name, payload, state, answer_status, answer)
         VALUES ('test-env', $1, 'raced', 'funds.settled', '{"amount": 7}', 'buffered', 202, '{}')`,
        [id],
      ),
    );
    await settle(engine);
    expect((await get(id)).state).toBe('completed');
    expect(svc.calls('/capture').at(-1)?.body).toEqual({ amount: 7 });
    expect(await buffered(id)).toEqual([]);
  });

  it('the sender needs flow:signal for the definition', async () => {
    const logic = settlement();
    const id = await start(logic);
    const as = (scopes: string[]) =>
      engine.deliverMessage(id, { name: 'funds.settled', payload: { amount: 1 }, key: 's', sender: { subject: 'eve', scopes } }, { env: 'test-env' }).catch((e: { code: string }) => e.code);
    expect(await as(['flow:decide', 'flow:start'])).toBe('FLOW_SCOPE_MISSING');
    expect(await as(['flow:signal:other.*'])).toBe('FLOW_SCOPE_MISSING');
    expect(await as([`flow:signal:${logic.logicId.split('.')[0]}.*`])).toMatchObject({ status: 200 });
  });

  it('the trace of an instance that took a delivered and a buffered message replays to the same decisions', async () => {
    const logic = gated();
    const id = await start(logic);
    await send(id, 'item', { n: 1 }, 'a');
    await go(id);
    await settle(engine);
    await send(id, 'item', { n: 2 }, 'b');
    await send(id, 'other', { n: 3 }, 'c');
    const record = await get(id);
    expect(record.state).toBe('completed');
    const trace = await exportTrace(engine, 'test-env', id);
    expect(trace.entries.filter((e) => e.event.type === 'message')).toHaveLength(3);
    const final = await replay(logic, trace);
    expect({ state: final.state, output: final.output }).toEqual({ state: record.state, output: record.output });
    // a different payload in the journal is a different decision: replay says so
    const tampered = structuredClone(trace);
    const entry = tampered.entries.find((e) => e.event.type === 'message')!;
    (entry.event as { args: { payload: unknown } }).args.payload = { n: 7 };
    await expect(replay(logic, tampered)).rejects.toMatchObject({ code: 'FLOW_REPLAY_DIVERGED' });
  });
});
