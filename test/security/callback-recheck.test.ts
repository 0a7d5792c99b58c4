import { afterAll, beforeAll, expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

/**
 * A start's `callback.url` is checked against the callbackAllowlist when the start is accepted and
 * again when the relay delivers: an operator who takes a host off the list (and restarts) stops
 * the callbacks already queued for it, and none is sent.
 */

const ENV = 'cb-env';
const SECRET = 'callback-recheck-secret';

describeEachDriver('callback URLs are re-checked at delivery', (getDb) => {
  let svc: FakeService;
  beforeAll(async () => {
    svc = await new FakeService().on('/cb', () => ({ status: 200, body: {} })).listen();
  });
  afterAll(() => svc.close());

  const lastError = async (id: string) =>
    (
      await asScheduler(getDb(), (c) =>
        c.query<{ delivered_at: Date | null; failed_at: Date | null; last_error: string | null }>(
          `SELECT delivered_at, failed_at, last_error FROM outbox WHERE workflow_id = $1 AND kind = 'callback'`,
          [id],
        ),
      )
    ).rows;

  it('a callback queued while its host was allowed is not delivered once the host is off the list', async () => {
    const host = new URL(svc.url).host;
    const open = new Engine({ db: getDb(), env: ENV, outboxSecret: SECRET, callbackAllowlist: [host] });
    const logic = uniqueLogic({ start: 'done', steps: { done: { kind: 'pass' } } });
    await open.publish(logic, ENV);
    const { id } = await open.start({ logicId: logic.logicId, input: {}, env: ENV, callback: { url: `${svc.url}/cb` } });
    await settle(open);
    expect((await open.get(id, ENV)).state).toBe('completed');

    // the operator narrows the list and restarts: the row written before is delivered by the new engine
    const narrowed = new Engine({ db: getDb(), env: ENV, outboxSecret: SECRET, callbackAllowlist: ['callbacks.example.com'] });
    await narrowed.outbox.drain();
    expect(svc.calls('/cb').filter((r) => r.headers['x-flow-workflow-id'] === id)).toEqual([]);
    expect(await lastError(id)).toEqual([
      expect.objectContaining({ delivered_at: null, failed_at: expect.any(Date), last_error: expect.stringMatching(/^FLOW_CALLBACK_HOST_NOT_ALLOWED/) }),
    ]);

    // with the host still listed, the same kind of row is delivered
    const again = await open.start({ logicId: logic.logicId, input: {}, env: ENV, callback: { url: `${svc.url}/cb` } });
    await settle(open);
    await open.outbox.drain();
    expect(svc.calls('/cb').filter((r) => r.headers['x-flow-workflow-id'] === again.id)).toHaveLength(1);
    await narrowed.close();
    await open.close();
  });

  it('a callback host that now resolves to an internal address the list does not name is not delivered', async () => {
    const port = new URL(svc.url).port;
    const logic = uniqueLogic({ start: 'done', steps: { done: { kind: 'pass' } } });
    // the hostname is listed; it resolves (through the test's hook, never real DNS) to loopback
    const engine = new Engine({
      db: getDb(),
      env: ENV,
      outboxSecret: SECRET,
      callbackAllowlist: ['hooks.example'],
      relay: { resolve: async () => [{ address: '127.0.0.1', family: 4 }] },
    });
    await engine.publish(logic, ENV);
    const { id } = await engine.start({ logicId: logic.logicId, input: {}, env: ENV, callback: { url: `http://hooks.example:${port}/cb` } });
    await settle(engine);
    await engine.outbox.drain();
    expect(svc.calls('/cb').filter((r) => r.headers['x-flow-workflow-id'] === id)).toEqual([]);
    expect(await lastError(id)).toEqual([expect.objectContaining({ delivered_at: null, last_error: expect.stringMatching(/^FLOW_CALLBACK_HOST_NOT_ALLOWED.*internal/) })]);
    await engine.close();
  });
});
