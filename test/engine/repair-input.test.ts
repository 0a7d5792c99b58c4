import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Engine } from '../../engine/runtime/engine.ts';
import { describeEachDriver } from '../support/db.ts';
import { OPERATOR, settle, testEngine, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

describeEachDriver('repair with new workflow input', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  beforeAll(async () => {
    svc = await new FakeService()
      .on('/reserve', () => ({ status: 200, body: { id: 'res-1' } }))
      .on('/charge', (r) => ((r.body as { n: number }).n === 1 ? { status: 422, body: { message: 'declined' } } : { status: 200, body: { charged: true } }))
      .listen();
    engine = testEngine(getDb(), svc);
  });
  afterAll(() => svc.close());

  it('replaces the input every later step reads, and the record shows it', async () => {
    const logic = uniqueLogic({
      start: 'reserve',
      steps: {
        reserve: { kind: 'proxy', handler: 'test', path: '/reserve', input: '{ "n": input.n }', next: 'charge' },
        charge: { kind: 'proxy', handler: 'test', path: '/charge', input: '{ "n": input.n }' },
      },
    });
    await engine.publish(logic, 'test-env');
    const { id } = await engine.start({ logicId: logic.logicId, input: { n: 1 }, env: 'test-env' });
    await settle(engine);
    expect((await engine.get(id, 'test-env')).state).toBe('failed');

    await engine.ops.repair(id, { rewindTo: 'reserve', input: { n: 2 } }, { ...OPERATOR, env: 'test-env', reason: 'new card' });
    await settle(engine);
    const record = await engine.get(id, 'test-env');
    // charge runs in a later transaction, from the stored instance: it must read the new input
    expect(svc.calls('/charge').map((c) => (c.body as { n: number }).n)).toEqual([1, 2]);
    expect(record.input).toEqual({ n: 2 });
    expect(record.state).toBe('completed');
  });
});
