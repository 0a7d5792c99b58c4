import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Engine } from '../../engine/runtime/engine.ts';
import { exportTrace, replay } from '../../engine/testing/index.ts';
import { describeEachDriver } from '../support/db.ts';
import { OPERATOR, settle, testEngine, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

describeEachDriver('operator verbs', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  let failCharge = true;
  let chargeUp = false;
  beforeAll(async () => {
    svc = await new FakeService()
      .on('/reserve', (r) => ({ status: 200, body: { id: `res-${(r.body as { n: number }).n}` } }))
      .on('/release', () => ({ status: 200, body: { released: true } }))
      .on('/charge', () => (failCharge ? { status: 422, body: { message: 'card declined' } } : { status: 200, body: { charged: true } }))
      .on('/flaky', () => ({ status: 503 }))
      .on('/notify', () => ({ status: 200, body: { sent: true } }))
      .on('/hold', () => ({ status: 200, body: { held: true } }))
      .on('/unhold', () => ({ status: 200, body: { unheld: true } }))
      .on('/charge-later', () => (chargeUp ? { status: 200, body: { charged: true } } : { status: 503 }))
      .listen();
    engine = testEngine(getDb(), svc);
  });
  afterAll(() => svc.close());

  const flow = () =>
    uniqueLogic({
      start: 'reserve',
      steps: {
        reserve: {
          kind: 'proxy',
          handler: 'test',
          path: '/reserve',
          input: '{ "n": input.n }',
          compensate: { kind: 'proxy', handler: 'test', path: '/release' },
          next: 'charge',
        },
        charge: { kind: 'proxy', handler: 'test', path: '/charge', input: '{ "res": steps.reserve.id }', next: 'notify' },
        notify: { kind: 'proxy', handler: 'test', path: '/notify' },
      },
    });

  async function startFlow(logic = flow(), n = 1) {
    await engine.publish(logic, 'test-env');
    const { id } = await engine.start({ logicId: logic.logicId, input: { n }, env: 'test-env' });
    await settle(engine);
    return { id, logic };
  }

  it('repair rewinds to the step and rotates its idempotency key', async () => {
    failCharge = true;
    const { id } = await startFlow(flow(), 2);
    expect((await engine.get(id, 'test-env')).state).toBe('compensated');
    failCharge = false;
    const before = svc.calls('/reserve').length;
    const preview = await engine.ops.previewRepair(id, { rewindTo: 'reserve', input: { n: 3 } }, { ...OPERATOR, env: 'test-env' });
    await engine.ops.repair(id, { rewindTo: 'reserve', input: { n: 3 } }, { ...OPERATOR, env: 'test-env', reason: 'card fixed' });
    await settle(engine);
    const record = await engine.get(id, 'test-env');
    expect(record.state).toBe('completed');
    expect(record.generation).toBe(1);
    const reserveCalls = svc.calls('/reserve').slice(before);
    expect(reserveCalls.map((c) => c.headers['idempotency-key'])).toEqual([`${id}:reserve:1`]);
    expect(reserveCalls[0]?.body).toEqual({ n: 3 });
    const reran = record.steps.filter((s) => s.generation === 1 && s.kind === 'step').map((s) => s.step);
    expect(preview.steps.map((s) => s.step)).toEqual(reran);
    expect(preview.steps.every((s) => s.callsOut && s.idempotencyKey?.endsWith(':1'))).toBe(true);
    expect(preview.compensations).toEqual(['reserve']);
    // earlier history stays
    expect(record.steps.filter((s) => s.generation === 0).length).toBeGreaterThan(0);
    const audit = await engine.ops.audit(id, { env: 'test-env' });
    expect(audit.map((a) => [a.verb, a.actor, a.reason])).toEqual([['repair', 'ops@example.com', 'card fixed']]);
    expect(audit[0]?.before).toMatchObject({ state: 'compensated', generation: 0 });
    expect(audit[0]?.after).toMatchObject({ state: 'pending', generation: 1 });
  });

  it('lists each compensation with the generation that registered it', async () => {
    failCharge = true;
    const { id } = await startFlow(flow(), 4);
    // repaired at reserve, still declined: the first reservation was undone, then the second
    await engine.ops.repair(id, { rewindTo: 'reserve', input: { n: 5 } }, { ...OPERATOR, env: 'test-env', reason: 'try again' });
    await settle(engine);
    const record = await engine.get(id, 'test-env');
    expect(record.state).toBe('compensated');
    const undone = record.steps.filter((s) => s.kind === 'compensation').map((s) => ({ step: s.step, generation: s.generation }));
    expect(undone).toEqual([
      { step: 'reserve', generation: 0 },
      { step: 'reserve', generation: 1 },
    ]);
    expect(record.compensations.map((c) => ({ step: c.step, generation: c.generation }))).toEqual(undone);
  });

  it('replayFrom re-runs from a step with the original input under a new generation', async () => {
    failCharge = false;
    const { id } = await startFlow(flow(), 5);
    const preview = await engine.ops.previewReplayFrom(id, { step: 'charge' }, { ...OPERATOR, env: 'test-env' });
    await engine.ops.replayFrom(id, { step: 'charge' }, { ...OPERATOR, env: 'test-env' });
    await settle(engine);
    const record = await engine.get(id, 'test-env');
    expect(record.state).toBe('completed');
    const reran = record.steps.filter((s) => s.generation === 1).map((s) => s.step);
    expect(reran).toEqual(['charge', 'notify']);
    expect(preview.steps.map((s) => s.step)).toEqual(reran);
    expect(svc.calls('/charge').at(-1)?.body).toEqual({ res: 'res-5' });
  });

  it('retry re-runs a dead-lettered step with a fresh attempt budget', async () => {
    const logic = uniqueLogic({
      start: 'flaky',
      steps: { flaky: { kind: 'proxy', handler: 'test', path: '/flaky', retry: { maxAttempts: 2, initialMs: 0 } } },
    });
    const { id } = await startFlow(logic);
    let record = await engine.get(id, 'test-env');
    expect(record.state).toBe('dead_lettered');
    expect(record.steps.map((s) => s.attempt)).toEqual([1, 2]);
    const dead = await engine.ops.listDeadLettered({ env: 'test-env' });
    expect(dead.find((d) => d.id === id)?.ctx.order).toEqual([]);
    await engine.ops.retry(id, { ...OPERATOR, env: 'test-env' });
    await settle(engine);
    record = await engine.get(id, 'test-env');
    expect(record.state).toBe('dead_lettered');
    expect(record.steps.map((s) => s.attempt)).toEqual([1, 2, 3, 4]);
    expect(new Set(record.steps.map((s) => s.idempotencyKey))).toEqual(new Set([`${id}:flaky:0`]));
  });

  it('the retry preview lists the dead-lettered step it re-runs, under its key, and stops where its answer is unknown', async () => {
    const logic = uniqueLogic({
      start: 'reserve',
      steps: {
        reserve: {
          kind: 'proxy',
          handler: 'test',
          path: '/reserve',
          input: '{ "n": 4 }',
          compensate: { kind: 'proxy', handler: 'test', path: '/release' },
          next: 'capture',
        },
        capture: {
          kind: 'proxy',
          handler: 'test',
          path: '/flaky',
          retry: { maxAttempts: 2, initialMs: 0 },
          output: { type: 'object', properties: { captureId: { type: 'string' } }, required: ['captureId'] },
        },
      },
    });
    const { id } = await startFlow(logic);
    expect((await engine.get(id, 'test-env')).state).toBe('dead_lettered');
    const preview = await engine.ops.previewRetry(id, { ...OPERATOR, env: 'test-env' });
    expect(preview.steps.map((s) => [s.step, s.idempotencyKey])).toEqual([['capture', `${id}:capture:0`]]);
    // capture never answered, and null breaks its output schema: the dry run cannot know what follows
    expect(preview.stopsAt).toEqual({ state: 'pending', step: 'capture' });
  });

  it('force-complete marks a dead-lettered step done and the flow goes on', async () => {
    const logic = uniqueLogic({
      start: 'flaky',
      steps: {
        flaky: { kind: 'proxy', handler: 'test', path: '/flaky', retry: { maxAttempts: 1 }, next: 'after' },
        after: { kind: 'pass', input: '{ "got": steps.flaky.v }' },
      },
    });
    const { id } = await startFlow(logic);
    await engine.ops.forceComplete(id, { step: 'flaky', output: { v: 42 } }, { ...OPERATOR, env: 'test-env' });
    const record = await engine.get(id, 'test-env');
    expect(record.state).toBe('completed');
    expect(record.output).toEqual({ got: 42 });
  });

  it('cancel with compensate unwinds registered compensations and ends cancelled', async () => {
    const logic = uniqueLogic({
      start: 'reserve',
      steps: {
        reserve: {
          kind: 'proxy',
          handler: 'test',
          path: '/reserve',
          input: '{ "n": 9 }',
          compensate: { kind: 'proxy', handler: 'test', path: '/release' },
          next: 'approve',
        },
        approve: { kind: 'decision', options: ['ok'] },
      },
    });
    const { id } = await startFlow(logic);
    expect((await engine.get(id, 'test-env')).state).toBe('waiting');
    await engine.ops.cancel(id, { reason: 'customer asked', compensate: true }, { ...OPERATOR, env: 'test-env' });
    await settle(engine);
    const record = await engine.get(id, 'test-env');
    expect(record.state).toBe('cancelled');
    expect(record.error).toEqual({ code: 'CANCELLED', message: 'customer asked' });
    expect(record.compensations).toEqual([{ step: 'reserve', generation: 0, state: 'succeeded', attempts: 1, error: null }]);
    expect(record.steps.find((s) => s.step === 'approve')?.state).toBe('superseded');
  });

  it('refuses a verb the state does not allow, changing nothing and auditing nothing', async () => {
    failCharge = false;
    const { id } = await startFlow(flow());
    const before = await engine.get(id, 'test-env');
    await expect(engine.ops.retry(id, { ...OPERATOR, env: 'test-env' })).rejects.toMatchObject({ code: 'FLOW_VERB_NOT_ALLOWED' });
    await expect(engine.ops.cancel(id, { reason: 'x' }, { ...OPERATOR, env: 'test-env' })).rejects.toMatchObject({
      code: 'FLOW_VERB_NOT_ALLOWED',
    });
    await expect(engine.ops.forceComplete(id, { step: 'notify', output: null }, { ...OPERATOR, env: 'test-env' })).rejects.toMatchObject({
      code: 'FLOW_VERB_NOT_ALLOWED',
    });
    await expect(engine.ops.repair(id, { rewindTo: 'nope' }, { ...OPERATOR, env: 'test-env' })).rejects.toMatchObject({
      code: 'FLOW_VERB_NOT_ALLOWED',
    });
    await expect(engine.ops.replayFrom(id, { step: 'nope' }, { ...OPERATOR, env: 'test-env' })).rejects.toMatchObject({
      code: 'FLOW_UNKNOWN_STEP',
    });
    expect(await engine.get(id, 'test-env')).toEqual(before);
    expect(await engine.ops.audit(id, { env: 'test-env' })).toEqual([]);
  });

  it('refuses a verb from an actor without its scope, or whose glob does not match the definition', async () => {
    const logic = flow();
    const { id } = await startFlow(logic);
    const as = (...scopes: string[]) => ({ actor: { subject: 'intern', scopes }, env: 'test-env' });
    for (const scopes of [[], ['flow:read', 'flow:retry', 'flow:repair'], ['flow:replay:payments.*'], ['flow:admin:other.*']]) {
      await expect(engine.ops.replayFrom(id, { step: 'reserve' }, as(...scopes))).rejects.toMatchObject({ code: 'FLOW_SCOPE_MISSING', status: 403 });
      await expect(engine.ops.previewReplayFrom(id, { step: 'reserve' }, as(...scopes))).rejects.toMatchObject({ code: 'FLOW_SCOPE_MISSING' });
    }
    expect(await engine.ops.audit(id, { env: 'test-env' })).toEqual([]);
    // an id from another env is absent there, whatever the scopes
    await expect(engine.ops.replayFrom(id, { step: 'reserve' }, { ...as(), env: 'elsewhere' })).rejects.toMatchObject({ status: 404 });
    await engine.ops.replayFrom(id, { step: 'reserve' }, as(`flow:replay:${logic.logicId.split('.')[0]}.*`));
    expect((await engine.ops.audit(id, { env: 'test-env' })).map((a) => a.actor)).toEqual(['intern']);
  });

  it('repair at the start step validates the replacement input against the input schema', async () => {
    failCharge = true;
    const logic = { ...flow() };
    const strict = uniqueLogic({ ...logic, input: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] } });
    const { id } = await startFlow(strict);
    await expect(
      engine.ops.repair(id, { rewindTo: 'reserve', input: { n: 'three' } }, { ...OPERATOR, env: 'test-env' }),
    ).rejects.toMatchObject({ code: 'FLOW_INPUT_INVALID' });
  });
  // reserve and hold take effect, charge dead-letters: both effects stay in place
  const twoEffects = () =>
    uniqueLogic({
      start: 'reserve',
      steps: {
        reserve: {
          kind: 'proxy',
          handler: 'test',
          path: '/reserve',
          input: '{ "n": input.n }',
          compensate: { kind: 'proxy', handler: 'test', path: '/release', input: '{ "res": steps.reserve.id }' },
          next: 'hold',
        },
        hold: { kind: 'proxy', handler: 'test', path: '/hold', compensate: { kind: 'proxy', handler: 'test', path: '/unhold' }, next: 'charge' },
        charge: { kind: 'proxy', handler: 'test', path: '/charge-later', retry: { maxAttempts: 1 } },
      },
    });

  it("the repair preview lists every effect of the rewound steps that stays in place, with its registered compensation", async () => {
    chargeUp = false;
    const { id } = await startFlow(twoEffects(), 1);
    expect((await engine.get(id, 'test-env')).state).toBe('dead_lettered');
    const kept = await engine.ops.previewRepair(id, { rewindTo: 'hold' }, { ...OPERATOR, env: 'test-env' });
    expect(kept.keptEffects).toEqual([
      { step: 'hold', generation: 0, compensation: 'proxy test /unhold', compensationKey: `${id}:hold:0:compensate` },
    ]);
    const all = await engine.ops.previewRepair(id, { rewindTo: 'reserve', input: { n: 2 } }, { ...OPERATOR, env: 'test-env' });
    expect(all.keptEffects.map((e) => [e.step, e.compensationKey])).toEqual([
      ['reserve', `${id}:reserve:0:compensate`],
      ['hold', `${id}:hold:0:compensate`],
    ]);
    const undone = await engine.ops.previewRepair(id, { rewindTo: 'reserve', input: { n: 2 }, compensateRewound: true }, { ...OPERATOR, env: 'test-env' });
    expect(undone.keptEffects).toEqual([]);
    expect(undone.steps.map((s) => s.idempotencyKey)).toEqual([
      `${id}:hold:0:compensate`,
      `${id}:reserve:0:compensate`,
      `${id}:reserve:1`,
      `${id}:hold:1`,
      `${id}:charge:1`,
    ]);
  });

  it('repair --compensate-rewound runs the rewound effects\' compensations first, last first, under their :compensate keys, then re-runs', async () => {
    chargeUp = false;
    const { id, logic } = await startFlow(twoEffects(), 1);
    expect((await engine.get(id, 'test-env')).state).toBe('dead_lettered');
    const from = svc.received.length;
    chargeUp = true;
    await engine.ops.repair(id, { rewindTo: 'reserve', input: { n: 2 }, compensateRewound: true }, { ...OPERATOR, env: 'test-env', reason: 'wrong amount' });
    await settle(engine);
    const record = await engine.get(id, 'test-env');
    expect([record.state, record.generation]).toEqual(['completed', 1]);
    const calls = svc.received.slice(from).map((c) => [c.path, c.headers['idempotency-key']]);
    expect(calls).toEqual([
      ['/unhold', `${id}:hold:0:compensate`],
      ['/release', `${id}:reserve:0:compensate`],
      ['/reserve', `${id}:reserve:1`],
      ['/hold', `${id}:hold:1`],
      ['/charge-later', `${id}:charge:1`],
    ]);
    // the compensation saw the output of the effect it undoes; the re-run took the new input
    expect(svc.received[from + 1]?.body).toEqual({ res: 'res-1' });
    expect(svc.received[from + 2]?.body).toEqual({ n: 2 });
    expect(record.compensations.map((c) => [c.step, c.state])).toEqual([
      ['reserve', 'succeeded'],
      ['hold', 'succeeded'],
      ['reserve', 'registered'],
      ['hold', 'registered'],
    ]);
    // decided in the core and journalled: the run replays with no calls
    const trace = await exportTrace(engine, 'test-env', id);
    const before = svc.received.length;
    const replayed = await replay(logic, trace);
    expect(svc.received.length).toBe(before);
    expect([replayed.state, replayed.generation]).toEqual(['completed', 1]);
  });
});
