import { Writable } from 'node:stream';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { LogicVersion, WorkflowRecord } from '../../contracts/index.ts';
import { Engine, type EngineOptions } from '../../engine/runtime/engine.ts';
import { createLogger } from '../../engine/runtime/log.ts';
import type { Db } from '../../engine/store/db.ts';
import { wakeCircuitHeld } from '../../engine/store/circuits.ts';
import { advanceClock } from '../../engine/store/timers.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { buildApi } from '../../engine/api/server.ts';
import { AUTH_SECRET, bearer } from '../api/support.ts';
import { describeEachDriver } from '../support/db.ts';
import { uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

/**
 * Backpressure from an owning service (core/hold.ts, runtime/circuits.ts): a 429/503 or an open
 * circuit holds the same attempt, on the database clock moved by hand (advanceClock), never by sleeping.
 */
describeEachDriver('backpressure', (getDb) => {
  let svc: FakeService;
  /** The service's own clock: the test moves it with the database's. */
  let svcNowMs = 0;
  /** Answers 429 (Retry-After: 5 s) until `throttleUntilMs` on the service's clock. */
  let throttleUntilMs = 0;
  let down = false;
  beforeAll(async () => {
    svc = await new FakeService()
      .on('/charge', () => (svcNowMs < throttleUntilMs ? { status: 429, headers: { 'retry-after': '5' }, body: { message: 'slow down' } } : { status: 200, body: { ok: true } }))
      .on('/busy', () => ({ status: 429, headers: { 'retry-after': '5' }, body: { message: 'slow down' } }))
      .on('/pay', () => (down ? { status: 500, body: { message: 'ledger down' } } : { status: 200, body: { paid: true } }))
      .listen();
  });
  afterAll(() => svc.close());

  const engineOn = (db: Db, extra: Partial<EngineOptions> = {}) =>
    new Engine({ db, env: 'bp-env', executors: { handlers: new Map([['LEDGER', { url: svc.url }]]) }, worker: { concurrency: 4 }, ...extra });

  /** Runs everything due, then moves both clocks `ms` on. */
  async function tick(engine: Engine, ms: number): Promise<void> {
    await engine.workers.drain();
    await asScheduler(engine.db, (c) => advanceClock(c, ms));
    svcNowMs += ms;
  }

  const oneStep = (path: string, extra: Partial<LogicVersion['steps'][string]> = {}) =>
    uniqueLogic({ domain: 'ledger', start: 'call', steps: { call: { kind: 'proxy', path, retry: { maxAttempts: 3, initialMs: 1000 }, ...extra } as never } });

  const rowsOf = (r: WorkflowRecord) => r.steps.map((s) => [s.attempt, s.state, s.error?.code ?? null]);

  it('a service answering 429 for 30 s then recovering: no attempt is used, none dead-letters, all complete', async () => {
    const engine = engineOn(getDb());
    const logic = oneStep('/charge');
    await engine.publish(logic);
    svcNowMs = 0;
    throttleUntilMs = 30_000;
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await engine.start({ logicId: logic.logicId, input: { i } })).id);
    for (let t = 0; t <= 40_000; t += 5_000) await tick(engine, 5_000);
    await engine.workers.drain();
    const records = await Promise.all(ids.map((id) => engine.get(id)));
    await engine.close();
    for (const r of records) {
      expect(r.state).toBe('completed');
      // six 429s (at 0, 5, … 25 s), each held on attempt 1, then the answer
      expect(rowsOf(r)).toEqual([...Array(6).fill([1, 'failed', 'FLOW_THROTTLED']), [1, 'succeeded', null]]);
      expect(r.steps[0]!.error?.status).toBe(429);
    }
    expect(svc.calls('/charge')).toHaveLength(5 * 7);
  });

  it('past its throttle budget a 429 counts as a failed attempt', async () => {
    const engine = engineOn(getDb());
    const logic = oneStep('/busy', { throttleBudgetMs: 10_000, retry: { maxAttempts: 2, initialMs: 1000 } } as never);
    await engine.publish(logic);
    const { id } = await engine.start({ logicId: logic.logicId, input: {} });
    for (let t = 0; t < 60_000; t += 5_000) await tick(engine, 5_000);
    const r = await engine.get(id);
    await engine.close();
    expect(r.state).toBe('dead_lettered');
    expect(rowsOf(r)).toEqual([
      [1, 'failed', 'FLOW_THROTTLED'],
      [1, 'failed', 'FLOW_THROTTLED'],
      [1, 'failed', 'HTTP_429'],
      [2, 'failed', 'HTTP_429'],
    ]);
  });

  it('a circuit opens after N failures, holds the other instances without attempts, and a probe closes it', async () => {
    const lines: Record<string, unknown>[] = [];
    const destination = new Writable({
      write(chunk, _enc, done) {
        lines.push(JSON.parse(String(chunk)));
        done();
      },
    });
    const engine = engineOn(getDb(), { circuits: { policy: { failures: 3, openMs: 60_000 } }, logger: createLogger({ destination }) });
    const logic = oneStep('/pay', { retry: { maxAttempts: 10, initialMs: 1000 } } as never);
    await engine.publish(logic);
    down = true;
    const first = (await engine.start({ logicId: logic.logicId, input: { n: 1 } })).id;
    // attempts 1–3 fail: the third opens the circuit
    for (let i = 0; i < 3; i++) await tick(engine, 2_000);
    expect(svc.calls('/pay')).toHaveLength(3);
    expect(lines.filter((l) => l['event'] === 'circuit_opened')).toHaveLength(1);
    expect((await engine.metrics.render()).body).toContain('flow_circuit_open{handler="LEDGER",env="bp-env"} 1');

    const others: string[] = [];
    for (let i = 0; i < 3; i++) others.push((await engine.start({ logicId: logic.logicId, input: { n: i + 2 } })).id);
    await engine.workers.drain();
    // the circuit is open: nobody called the service, nobody used an attempt
    expect(svc.calls('/pay')).toHaveLength(3);
    for (const id of others) expect(rowsOf(await engine.get(id))).toEqual([[1, 'failed', 'FLOW_CIRCUIT_OPEN'], [1, 'running', null]]);
    const stuck = await engine.ops.list({ stuck: true }, { env: 'bp-env' });
    expect(stuck.filter((s) => others.includes(s.id)).map((s) => s.stuckReason)).toEqual(['circuit_open', 'circuit_open', 'circuit_open']);
    // the console's overview names the paused handler and why
    const api = await buildApi({ engine, auth: { secret: AUTH_SECRET, production: false } });
    const overview = await api.app.inject({ url: '/v1/envs/bp-env/overview', headers: await bearer({ envs: ['bp-env'] }) });
    await api.app.close();
    expect(overview.statusCode).toBe(200);
    expect(overview.json().pausedHandlers).toEqual([
      expect.objectContaining({ handler: 'LEDGER', reason: 'circuit_open', failures: 3, lastError: expect.stringContaining('HTTP_500') }),
    ]);

    // a circuit that closes wakes the instances it held: they are due at once, not at their hold's end
    const due = () => asScheduler(engine.db, async (c) => (await c.query('SELECT count(*)::int AS n FROM workflows WHERE id = ANY($1) AND run_at <= now()', [others])).rows[0].n);
    expect(await due()).toBe(0);
    await asScheduler(engine.db, (c) => wakeCircuitHeld(c, { env: 'bp-env' }));
    expect(await due()).toBe(3);

    down = false;
    // the open time runs out: one probe goes, gets an answer and closes the circuit; an instance
    // held while the probe was out waits at most the probe's timeout (30 s)
    await tick(engine, 60_000);
    await tick(engine, 30_000);
    await engine.workers.drain();
    const records = await Promise.all([first, ...others].map((id) => engine.get(id)));
    const body = (await engine.metrics.render()).body;
    await engine.close();
    for (const r of records) expect(r.state).toBe('completed');
    // the held instances completed on their first attempt; the first one on the attempt after its three failures
    // (its step rows in the message: once, under load, a held one showed an attempt 2)
    for (const r of records.slice(1)) expect(new Set(r.steps.map((s) => s.attempt)), JSON.stringify(rowsOf(r))).toEqual(new Set([1]));
    expect(records[0]!.steps.filter((s) => s.state !== 'failed' || s.error?.code !== 'FLOW_CIRCUIT_OPEN').map((s) => [s.attempt, s.state])).toEqual([
      [1, 'failed'],
      [2, 'failed'],
      [3, 'failed'],
      [4, 'succeeded'],
    ]);
    expect(lines.filter((l) => l['event'] === 'circuit_closed')).toHaveLength(1);
    expect(body).not.toContain('flow_circuit_open{');
    expect(body).toMatch(/flow_holds_total\{reason="circuit_open"\} [1-9]/);
    // one call per instance after the circuit closed, the probe among them
    expect(svc.calls('/pay')).toHaveLength(3 + 4);
  });
});
