import { Writable } from 'node:stream';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import { createLogger } from '../../engine/runtime/log.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

/** The worker side's structured lines: each failure, retry, dead letter and compensation names its instance, step, attempt and code. */
describeEachDriver('engine log lines', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  const lines: Record<string, unknown>[] = [];
  beforeAll(async () => {
    svc = await new FakeService()
      .on('/ok', () => ({ status: 200, body: {} }))
      .on('/down', () => ({ status: 503 }))
      .on('/declined', () => ({ status: 422, body: { message: 'declined' } }))
      .listen();
    const destination = new Writable({
      write(chunk, _enc, done) {
        for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
        done();
      },
    });
    engine = new Engine({ db: getDb(), env: 'log-env', executors: { handlers: new Map([['TEST', { url: svc.url }]]) }, logger: createLogger({ level: 'debug', destination }) });
  });
  afterAll(async () => {
    await engine.close();
    await svc.close();
  });

  const about = (id: string) => lines.filter((l) => l['workflowId'] === id);

  it('a transient failure, its retry and the dead letter each write a line with env, logicId, workflowId, step, attempt and code', async () => {
    const doc = uniqueLogic({ start: 'call', steps: { call: { kind: 'proxy', handler: 'TEST', path: '/down', retry: { maxAttempts: 2, initialMs: 0 } } } });
    await engine.publish(doc, 'log-env');
    const { id } = await engine.start({ logicId: doc.logicId, input: {}, env: 'log-env' });
    await settle(engine);
    const mine = about(id);
    const base = { env: 'log-env', logicId: doc.logicId, workflowId: id, step: 'call' };
    expect(mine.filter((l) => l['msg'] === 'attempt failed')).toEqual([
      expect.objectContaining({ ...base, attempt: 1, code: 'HTTP_503', retryable: true, event: 'attempt_failed' }),
      expect.objectContaining({ ...base, attempt: 2, code: 'HTTP_503', retryable: true, event: 'attempt_failed' }),
    ]);
    expect(mine.find((l) => l['msg'] === 'retry scheduled')).toMatchObject({ ...base, attempt: 1, event: 'retry_scheduled' });
    expect(mine.find((l) => String(l['msg']).startsWith('dead-lettered'))).toMatchObject({ ...base, attempt: 2, code: 'HTTP_503', level: 50, event: 'dead_lettered' });
  });

  it('a permanent failure that unwinds writes a line when compensating begins and one per compensation', async () => {
    const doc = uniqueLogic({
      start: 'reserve',
      steps: {
        reserve: { kind: 'proxy', handler: 'TEST', path: '/ok', next: 'charge', compensate: { kind: 'proxy', handler: 'TEST', path: '/ok' } },
        charge: { kind: 'proxy', handler: 'TEST', path: '/declined' },
      },
    });
    await engine.publish(doc, 'log-env');
    const { id } = await engine.start({ logicId: doc.logicId, input: {}, env: 'log-env' });
    await settle(engine);
    const mine = about(id);
    expect(mine.find((l) => String(l['msg']).startsWith('compensating'))).toMatchObject({ logicId: doc.logicId, step: 'charge', code: 'HTTP_422', event: 'compensating' });
    expect(mine.find((l) => l['msg'] === 'compensation succeeded')).toMatchObject({ step: 'reserve', kind: 'compensation', attempt: 1, event: 'compensation_succeeded' });
  });

  it('an operator verb writes a line naming the actor', async () => {
    const doc = uniqueLogic({ start: 'call', steps: { call: { kind: 'proxy', handler: 'TEST', path: '/down', retry: { maxAttempts: 1 } } } });
    await engine.publish(doc, 'log-env');
    const { id } = await engine.start({ logicId: doc.logicId, input: {}, env: 'log-env' });
    await settle(engine);
    await engine.ops.cancel(id, { reason: 'gone' }, { actor: { subject: 'ops@example.com', scopes: ['flow:admin'] }, reason: 'gone', env: 'log-env' });
    expect(about(id).find((l) => l['msg'] === 'operator cancel')).toMatchObject({ actor: 'ops@example.com', reason: 'gone', logicId: doc.logicId });
  });
});
