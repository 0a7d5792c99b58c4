import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import { TestRunner } from '../../engine/testing/index.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { describeEachDriver } from '../support/db.ts';
import { OPERATOR, uniqueLogic } from '../support/engine.ts';
import { LedgerService } from '../support/ledger-service.ts';

const ENV = 'loop-keys';

/**
 * A polling loop `check → note → route → wait → check`: the owning service answers `ready` only on
 * the third check it applies. Its ledger replays the first answer for a repeated key, so a loop
 * that reuses the key never sees `ready` and never ends.
 */
const pollingLoop = () =>
  uniqueLogic({
    start: 'check',
    steps: {
      check: { kind: 'proxy', path: '/check', compensate: { kind: 'proxy', path: '/uncheck' }, next: 'note' },
      note: { kind: 'emit', event: 'poll.checked', payload: '{ "ready": steps.check.ready }', next: 'route' },
      route: { kind: 'choice', branches: [{ when: 'steps.check.ready = true', next: 'stop' }], otherwise: 'wait' },
      wait: { kind: 'delay', duration: 'PT0S', next: 'check' },
      stop: { kind: 'fail', code: 'STOP', message: 'undo every check' },
    },
  });

describeEachDriver('loops: each visit of a step has its own idempotency key', (getDb) => {
  let svc: LedgerService;
  let engine: Engine;
  const applied = new Map<string, number>();

  beforeAll(async () => {
    svc = await new LedgerService({
      operations: {
        '/check': (_body, info) => {
          const n = (applied.get(info.workflowId) ?? 0) + 1;
          applied.set(info.workflowId, n);
          return { status: 200, body: { ready: n >= 3 } };
        },
        '/uncheck': () => ({ status: 200, body: {} }),
      },
    }).listen();
    engine = new Engine({
      db: getDb(),
      env: ENV,
      executors: { handlers: new Map([['TEST', { url: svc.mount('/svc') }]]) },
      worker: { pollMs: 20 },
    });
  });
  afterAll(async () => {
    await engine?.close();
    await svc?.close();
  });

  it('a step entered again sends :visit:<k>, registers and runs one compensation per visit, and emits one key per visit', async () => {
    const logic = pollingLoop();
    await engine.publish(logic);
    await engine.workers.start();
    const { id } = await engine.start({ logicId: logic.logicId, input: {} });
    const checks = () => svc.ledger.deliveries.filter((d) => d.workflowId === id && d.op === '/check');
    // with a reused key the loop never ends: stop it after three checks and let the assertions say why
    for (let i = 0; i < 2000 && checks().length < 3; i++) await sleep(10);
    let record = await engine.get(id);
    if (record.state !== 'compensated') {
      for (let i = 0; i < 500 && !['compensated', 'failed', 'waiting'].includes(record.state) && checks().length <= 3; i++) {
        await sleep(10);
        record = await engine.get(id);
      }
    }
    if (record.state !== 'compensated') await engine.ops.cancel(id, { reason: 'the loop did not end' }, OPERATOR).catch(() => {});
    await engine.workers.stop();

    const key = `${id}:check:0`;
    expect(checks().map((d) => [d.key, d.outcome])).toEqual([
      [key, 'applied'],
      [`${key}:visit:2`, 'applied'],
      [`${key}:visit:3`, 'applied'],
    ]);
    expect(record.state).toBe('compensated');
    expect(record.error?.code).toBe('STOP');
    // one registration per visit, undone last first
    const undos = svc.ledger.deliveries.filter((d) => d.workflowId === id && d.op === '/uncheck');
    expect(undos.map((d) => d.key)).toEqual([`${key}:visit:3:compensate`, `${key}:visit:2:compensate`, `${key}:compensate`]);
    expect(record.compensations.map((c) => [c.step, c.state])).toEqual([
      ['check', 'succeeded'],
      ['check', 'succeeded'],
      ['check', 'succeeded'],
    ]);
    const outbox = await asScheduler(getDb(), (c) =>
      c.query<{ idempotency_key: string; payload: unknown }>(`SELECT idempotency_key, payload FROM outbox WHERE workflow_id = $1 AND kind = 'event' ORDER BY id`, [id]),
    );
    expect(outbox.rows).toEqual([
      { idempotency_key: `${id}:note:0`, payload: { ready: false } },
      { idempotency_key: `${id}:note:0:visit:2`, payload: { ready: false } },
      { idempotency_key: `${id}:note:0:visit:3`, payload: { ready: true } },
    ]);
  });
});

it('TestRunner sends the same per-visit keys as the engine', async () => {
  const logic = pollingLoop();
  const keys: string[] = [];
  let n = 0;
  const runner = new TestRunner(logic, {
    'test/check': (call) => {
      keys.push(call.idempotencyKey);
      return { status: 'succeeded', output: { ready: ++n >= 3 } };
    },
    'test/uncheck': (call) => {
      keys.push(call.idempotencyKey);
      return { status: 'succeeded', output: {} };
    },
  });
  const { instance, flow } = await runner.run({}, { id: 'wf-1', maxEvents: 200 });
  expect(instance.state).toBe('compensated');
  expect(keys).toEqual([
    'wf-1:check:0',
    'wf-1:check:0:visit:2',
    'wf-1:check:0:visit:3',
    'wf-1:check:0:visit:3:compensate',
    'wf-1:check:0:visit:2:compensate',
    'wf-1:check:0:compensate',
  ]);
  expect(flow.outbox.map((o) => o.idempotencyKey)).toEqual(['wf-1:note:0', 'wf-1:note:0:visit:2', 'wf-1:note:0:visit:3']);
});
