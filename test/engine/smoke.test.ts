import { afterAll, beforeAll, expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';
import { FakeService } from '../support/fake-service.ts';

describeEachDriver('engine smoke', (getDb) => {
  let svc: FakeService;
  beforeAll(async () => {
    svc = await new FakeService()
      .on('/reserve', (r) => ({ status: 200, body: { reservationId: `r-${(r.body as { cents: number }).cents}` } }))
      .on('/release', () => ({ status: 200, body: {} }))
      .on('/capture', () => ({ status: 422, body: { message: 'card declined' } }))
      .listen();
  });
  afterAll(() => svc.close());

  it('runs proxy steps and compensates after a permanent failure', async () => {
    const engine = new Engine({
      db: getDb(),
      executors: { handlers: new Map([['PAYMENTS', { url: svc.url }]]) },
      worker: { pollMs: 20 },
    });
    const logic = makeLogic({
      logicId: 'payments.capture',
      domain: 'payments',
      start: 'reserve',
      steps: {
        reserve: {
          kind: 'proxy',
          path: '/reserve',
          input: '{ "cents": input.amount * 100 }',
          compensate: { kind: 'proxy', path: '/release', input: '{ "id": steps.reserve.reservationId }' },
          next: 'capture',
        },
        capture: { kind: 'proxy', path: '/capture', input: '{ "id": steps.reserve.reservationId }' },
      },
    });
    await engine.publish(logic);
    await engine.workers.start();
    const { id } = await engine.start({ logicId: 'payments.capture', input: { amount: 12 } });
    const record = await engine.settled(id);
    await engine.close();
    expect(record.state).toBe('compensated');
    expect(record.error?.code).toBe('HTTP_422');
    expect(svc.calls('/release')[0]?.body).toEqual({ id: 'r-1200' });
    expect(svc.calls('/release')[0]?.headers['idempotency-key']).toBe(`${id}:reserve:0:compensate`);
    expect(record.steps.map((s) => [s.step, s.state])).toEqual([
      ['reserve', 'succeeded'],
      ['capture', 'failed'],
      ['reserve', 'succeeded'],
    ]);
  });
});
