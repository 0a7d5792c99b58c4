import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LogicVersion, StepDef } from '../../contracts/index.ts';
import type { Api } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { refusedForData } from '../../engine/store/errors.ts';
import { snapshot } from '../api/snapshot.ts';
import { testApi } from '../api/support.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle, uniqueLogic } from '../support/engine.ts';
import { FakeService, type Reply } from '../support/fake-service.ts';

/**
 * A step result Postgres cannot store must not wedge its instance: each value below once held
 * the instance in `processing` with a commit that could never succeed, until its lease lapsed and
 * another worker called the step again (beyond maxAttempts). Now each is a permanent step error
 * with its own code, taking `onError` or failing the workflow, and the step is called once.
 */
const CAP = 64 * 1024;
const env = 'test-env';

/** A body that would go on for 60 MB, written only as fast as the engine reads it; counts what left. */
function endless(sent: { bytes: number }): Reply['raw'] {
  return (res: ServerResponse) => {
    const chunk = Buffer.from(`"${'x'.repeat(16 * 1024 - 2)}",`);
    res.write('[');
    const pump = () => {
      while (sent.bytes < 60 * 1024 * 1024 && !res.destroyed) {
        sent.bytes += chunk.length;
        if (!res.write(chunk)) return void res.once('drain', pump);
      }
      if (!res.destroyed) res.end('1]');
    };
    res.on('error', () => {});
    pump();
  };
}

describeEachDriver('unstorable step results', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  let answer: Reply = { status: 200, body: {} };
  let api: Api;
  const streamed = { bytes: 0 };

  beforeAll(async () => {
    svc = await new FakeService()
      .on('/call', () => answer)
      .on('/ok', () => ({ status: 200, body: { ok: true } }))
      .on('/undo', () => ({ status: 200, body: { undone: true } }))
      .on('/later', () => ({ status: 202, body: { status: 'waiting' } }))
      .listen();
    engine = new Engine({ db: getDb(), env, maxInputBytes: CAP, executors: { handlers: new Map([['TEST', { url: svc.url }]]) } });
    api = await testApi(engine);
  });
  afterAll(async () => {
    await api?.app.close();
    await engine?.close();
    await svc?.close();
  });

  /** Runs a one-call workflow (maxAttempts 2) against `reply`; `onError` routes a failure to a pass step. */
  async function run(reply: Reply, opts: { onError?: boolean } = {}) {
    answer = reply;
    const before = svc.calls('/call').length;
    const logic = uniqueLogic({
      start: 'call',
      steps: {
        call: { kind: 'proxy', path: '/call', handler: 'test', retry: { maxAttempts: 2, initialMs: 1, maxMs: 1 }, ...(opts.onError ? { onError: 'handled' } : {}) },
        ...(opts.onError ? { handled: { kind: 'pass' as const, input: '{ "handled": steps.call.error.code }' } } : {}),
      },
    });
    return { ...(await runLogic(logic)), calls: svc.calls('/call').length - before };
  }

  async function runLogic(logic: LogicVersion, input: unknown = {}) {
    await engine.publish(logic, env);
    const { id } = await engine.start({ logicId: logic.logicId, input });
    await settle(engine);
    return engine.get(id);
  }

  it('a response holding a NUL character fails its step FLOW_RESULT_UNSTORABLE, called once', async () => {
    const r = await run({ status: 200, body: { s: 'a\u0000b' } });
    expect(r.state).toBe('failed');
    expect(r.error?.code).toBe('FLOW_RESULT_UNSTORABLE');
    expect(r.error?.message).toContain('$.s');
    expect(r.calls).toBe(1);
  });

  it('a response holding a lone surrogate fails its step FLOW_RESULT_UNSTORABLE and takes onError', async () => {
    const r = await run({ status: 200, raw: '{"s":"half \\ud800 pair"}' }, { onError: true });
    expect(r.state).toBe('completed');
    expect(r.output).toEqual({ handled: 'FLOW_RESULT_UNSTORABLE' });
    expect(r.calls).toBe(1);
  });

  it('a body over the cap is dropped where it passes it, not read to its end: FLOW_RESULT_TOO_LARGE', async () => {
    streamed.bytes = 0;
    const r = await run({ status: 200, raw: endless(streamed) });
    expect(r.state).toBe('failed');
    expect(r.error?.code).toBe('FLOW_RESULT_TOO_LARGE');
    expect(r.calls).toBe(1);
    // what left the service before the engine hung up: the cap plus what sockets buffer, not 60 MB
    expect(streamed.bytes).toBeLessThan(16 * 1024 * 1024);
  });

  it('a response nested 30,000 deep (within the size cap) fails its step FLOW_RESULT_UNSTORABLE without overflowing the stack', async () => {
    const depth = 30_000;
    const r = await run({ status: 200, raw: `${'['.repeat(depth)}${']'.repeat(depth)}` });
    expect(r.state).toBe('failed');
    expect(r.error?.code).toBe('FLOW_RESULT_UNSTORABLE');
    expect(r.error?.message).toContain('deeper than 512');
    expect(r.calls).toBe(1);
  });

  it('a huge Retry-After waits at most the configured hour, and the step is called maxAttempts times', async () => {
    for (const retryAfter of ['99999999999999', '3000000000', '9'.repeat(400)]) {
      const logic = uniqueLogic({ start: 'call', steps: { call: { kind: 'proxy', path: '/call', handler: 'test', retry: { maxAttempts: 2, initialMs: 1, maxMs: 1 } } } });
      answer = { status: 503, headers: { 'retry-after': retryAfter }, body: { message: 'busy' } };
      await engine.publish(logic, env);
      const before = svc.calls('/call').length;
      const { id } = await engine.start({ logicId: logic.logicId, input: {} });
      await engine.workers.drain();
      const row = await getDb().pool.query<{ state: string; wait_s: number }>('SELECT state, extract(epoch FROM run_at - now()) AS wait_s FROM workflows WHERE id = $1', [id]);
      expect(row.rows[0]!.state, retryAfter).toBe('pending');
      expect(Number(row.rows[0]!.wait_s), retryAfter).toBeLessThanOrEqual(3600);
      expect(Number(row.rows[0]!.wait_s), retryAfter).toBeGreaterThan(3500);
      await settle(engine);
      const r = await engine.get(id);
      expect(r.state, retryAfter).toBe('dead_lettered');
      expect(svc.calls('/call').length - before, retryAfter).toBe(2);
    }
  });

  it('a delay of P999999999D fails its step FLOW_TIME_OUT_OF_RANGE', async () => {
    const r = await runLogic(uniqueLogic({ start: 'wait', steps: { wait: { kind: 'delay', duration: 'P999999999D' } } }));
    expect(r.state).toBe('failed');
    expect(r.error?.code).toBe('FLOW_TIME_OUT_OF_RANGE');
  });

  it('a decision deadline of P999999999D fails its step FLOW_TIME_OUT_OF_RANGE and takes onError', async () => {
    const steps: Record<string, StepDef> = {
      ask: { kind: 'decision', options: ['yes'], deadline: 'P999999999D', onError: 'handled' },
      handled: { kind: 'pass', input: '{ "handled": steps.ask.error.code }' },
    };
    const r = await runLogic(uniqueLogic({ start: 'ask', steps }));
    expect(r.state).toBe('completed');
    expect(r.output).toEqual({ handled: 'FLOW_TIME_OUT_OF_RANGE' });
  });

  it('an until far in the past or the future fails its step FLOW_TIME_OUT_OF_RANGE', async () => {
    for (const until of ['-200000-01-01T00:00:00Z', '+200000-01-01T00:00:00Z', '+010000-01-01T00:00:00Z']) {
      const r = await runLogic(uniqueLogic({ start: 'wait', steps: { wait: { kind: 'delay', until: 'input.at' } } }), { at: until });
      expect(r.state, until).toBe('failed');
      expect(r.error?.code, until).toBe('FLOW_TIME_OUT_OF_RANGE');
    }
  });

  it('a commit Postgres refuses for its data (SQLSTATE 22) fails the attempt FLOW_RESULT_UNSTORABLE instead of retrying it', async () => {
    // the result itself is fine; the emit step it leads to makes a payload jsonb refuses
    answer = { status: 200, body: { ok: true } };
    const before = svc.calls('/call').length;
    const r = await runLogic(
      uniqueLogic({
        start: 'call',
        steps: {
          call: { kind: 'proxy', path: '/call', handler: 'test', retry: { maxAttempts: 2, initialMs: 1, maxMs: 1 }, next: 'tell' },
          tell: { kind: 'emit', event: 'x.done', payload: '{ "s": "a\\u0000b" }' },
        },
      }),
    );
    expect(r.state).toBe('failed');
    expect(r.error?.code).toBe('FLOW_RESULT_UNSTORABLE');
    expect(r.error?.message).toMatch(/SQLSTATE 22/);
    expect(svc.calls('/call').length - before).toBe(1);
  });

  it('a 2xx answer that cannot be stored took effect: the step keeps its compensation, which runs as the workflow fails', async () => {
    answer = { status: 200, body: { s: 'a\u0000b' } };
    const r = await runLogic(
      uniqueLogic({
        start: 'call',
        steps: { call: { kind: 'proxy', path: '/call', handler: 'test', compensate: { kind: 'proxy', path: '/undo', handler: 'test' } } },
      }),
    );
    expect(r.state).toBe('compensated');
    expect(r.error?.code).toBe('FLOW_RESULT_UNSTORABLE');
    const undo = svc.calls('/undo').filter((c) => c.headers['x-flow-workflow-id'] === r.id);
    expect(undo.map((c) => c.headers['idempotency-key'])).toEqual([`${r.id}:call:0:compensate`]);
  });

  it('a result whose commit Postgres refuses took effect too: the step keeps its compensation', async () => {
    answer = { status: 200, body: { ok: true } };
    const r = await runLogic(
      uniqueLogic({
        start: 'call',
        steps: {
          call: { kind: 'proxy', path: '/call', handler: 'test', compensate: { kind: 'proxy', path: '/undo', handler: 'test' }, next: 'tell' },
          tell: { kind: 'emit', event: 'x.done', payload: '{ "s": "a\\u0000b" }' },
        },
      }),
    );
    expect(r.state).toBe('compensated');
    expect(r.error?.message).toMatch(/SQLSTATE 22/);
    const undo = svc.calls('/undo').filter((c) => c.headers['x-flow-workflow-id'] === r.id);
    expect(undo.map((c) => c.headers['idempotency-key'])).toEqual([`${r.id}:call:0:compensate`]);
  });

  it('only a refusal for the data is final: a lost connection, a shutdown or a deadlock is retried', () => {
    for (const code of ['22P05', '22P02', '22008', '54000', '54001']) expect(refusedForData({ code }), code).toBe(true);
    for (const code of ['08006', '08003', '57P01', '40P01', '40001', 'ECONNRESET', undefined]) expect(refusedForData({ code }), String(code)).toBe(false);
  });

  describe('callbacks and decisions', () => {
    async function parked(): Promise<{ id: string; token: string }> {
      const logic = uniqueLogic({
        start: 'later',
        steps: { later: { kind: 'proxy', path: '/later', handler: 'test', next: 'ask' }, ask: { kind: 'decision', options: ['yes'] } },
      });
      await engine.publish(logic, env);
      const { id } = await engine.start({ logicId: logic.logicId, input: {} });
      await settle(engine);
      return { id, token: svc.calls('/later').at(-1)!.headers['x-flow-resume-token']! };
    }

    const deep = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;
    const hostile = {
      nul: '"a\\u0000b"',
      surrogate: '"\\udc00"',
      deep: deep(100_000),
    };

    it('a callback body that cannot be stored is a 4xx problem with a code, and nothing is written', async () => {
      const { id, token } = await parked();
      for (const [name, output] of Object.entries(hostile)) {
        const before = await snapshot(getDb());
        const res = await api.app.inject({ method: 'POST', url: `/v1/callbacks/${token}`, headers: { 'content-type': 'application/json' }, payload: `{"output":${output}}` });
        expect(res.statusCode, `${name}: ${res.body.slice(0, 300)}`).toBeGreaterThanOrEqual(400);
        expect(res.statusCode, name).toBeLessThan(500);
        expect(res.headers['content-type'], name).toContain('application/problem+json');
        expect(res.json().code, name).toMatch(/^FLOW_/);
        expect(await snapshot(getDb()), name).toEqual(before);
      }
      expect((await engine.get(id)).state).toBe('waiting');
    });

    it('a decision payload that cannot be stored is a 4xx problem with a code, and nothing is written', async () => {
      const { id, token } = await parked();
      const ok = await api.app.inject({ method: 'POST', url: `/v1/callbacks/${token}`, payload: { output: {} } });
      expect(ok.statusCode).toBe(200);
      const { bearer } = await import('../api/support.ts');
      const auth = await bearer({ envs: [env], scope: 'flow:admin' });
      for (const [name, payload] of Object.entries(hostile)) {
        const before = await snapshot(getDb());
        const res = await api.app.inject({
          method: 'POST',
          url: `/v1/envs/${env}/workflows/${id}/decisions/ask`,
          headers: { ...auth, 'content-type': 'application/json' },
          payload: `{"option":"yes","payload":${payload}}`,
        });
        expect(res.statusCode, `${name}: ${res.body.slice(0, 300)}`).toBeGreaterThanOrEqual(400);
        expect(res.statusCode, name).toBeLessThan(500);
        expect(res.json().code, name).toMatch(/^FLOW_/);
        expect(await snapshot(getDb()), name).toEqual(before);
      }
      expect((await engine.get(id)).state).toBe('waiting');
    });
  });
});
