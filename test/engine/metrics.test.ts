import { afterAll, beforeAll, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { describeEachDriver } from '../support/db.ts';
import { advance, settle, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

const ENVS = ['metrics-a', 'metrics-b'];
const FAST = { maxAttempts: 2, initialMs: 0 };

type Sample = { name: string; labels: Record<string, string>; value: number };

/** The samples of a Prometheus text exposition. */
function parse(body: string): Sample[] {
  return body
    .split('\n')
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => {
      const m = /^([a-z_:]+)(?:\{(.*)\})? (\S+)$/.exec(l)!;
      const labels = Object.fromEntries([...(m[2] ?? '').matchAll(/([a-z_]+)="([^"]*)"/g)].map((x) => [x[1]!, x[2]!]));
      return { name: m[1]!, labels, value: Number(m[3]) };
    });
}

/** name → "label=value,…" (sorted, `le` excluded) → value, for comparing with rows from SQL. */
function table(samples: Sample[], name: string, keys: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of samples.filter((x) => x.name === name)) out[keys.map((k) => s.labels[k]).join('|')] = s.value;
  return out;
}

describeEachDriver('metrics', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  const flakyTried = new Set<string>();
  beforeAll(async () => {
    svc = await new FakeService()
      .on('/ok', () => ({ status: 200, body: { ok: true } }))
      .on('/flaky', (r) => {
        // the first call of each key fails once: one retry per instance, however the calls interleave
        const key = r.headers['idempotency-key']!;
        if (flakyTried.has(key)) return { status: 200, body: {} };
        flakyTried.add(key);
        return { status: 503 };
      })
      .on('/declined', () => ({ status: 422, body: { message: 'declined' } }))
      .on('/broken', () => ({ status: 500 }))
      .on('/later', () => ({ status: 202, body: { status: 'waiting' } }))
      .listen();
    engine = new Engine({ db: getDb(), executors: { handlers: new Map([['TEST', { url: svc.url }]]) } });
  });
  afterAll(async () => {
    await engine.close();
    await svc.close();
  });

  const sql = async <T>(text: string) => (await asScheduler(getDb(), (c) => c.query<T & object>(text))).rows;

  it('after real workflows ran, the scrape agrees with the database', async () => {
    const child = uniqueLogic({ start: 'ask', steps: { ask: { kind: 'decision', options: ['go'] } } });
    const flows: LogicVersion[] = [
      uniqueLogic({ start: 'p_ok', steps: { p_ok: { kind: 'proxy', path: '/ok' } } }),
      uniqueLogic({ start: 'p_flaky', steps: { p_flaky: { kind: 'proxy', path: '/flaky', retry: FAST } } }),
      uniqueLogic({
        start: 'p_reserve',
        steps: {
          p_reserve: { kind: 'proxy', path: '/ok', next: 'p_charge', compensate: { kind: 'proxy', path: '/ok' } },
          p_charge: { kind: 'proxy', path: '/declined' },
        },
      }),
      uniqueLogic({
        start: 'p_reserve',
        steps: {
          p_reserve: { kind: 'proxy', path: '/ok', next: 'p_charge', compensate: { kind: 'proxy', path: '/broken', retry: FAST } },
          p_charge: { kind: 'proxy', path: '/declined' },
        },
      }),
      uniqueLogic({ start: 'ask', steps: { ask: { kind: 'decision', options: ['go'] } } }),
      uniqueLogic({ start: 'p_later', steps: { p_later: { kind: 'proxy', path: '/later' } } }),
      uniqueLogic({ start: 'd_sleep', steps: { d_sleep: { kind: 'delay', duration: 'PT1H' } } }),
      uniqueLogic({ start: 'd_long', steps: { d_long: { kind: 'delay', duration: 'P2D' } } }),
      uniqueLogic({ start: 'fan', steps: { fan: { kind: 'children', logicId: child.logicId, items: '[1, 2]', itemInput: '{}', failurePolicy: 'all_settled' } } }),
    ];
    for (const env of ENVS) {
      await engine.publishVersion(env, child);
      for (const doc of flows) {
        await engine.publishVersion(env, doc);
        await engine.start({ logicId: doc.logicId, input: {}, env });
      }
    }
    await settle(engine);
    await advance(engine, 3_600_000); // the PT1H delays fire; the P2D ones stay parked
    // pending but not runnable: a retry an hour away
    const backoff = uniqueLogic({ start: 'p_backoff', steps: { p_backoff: { kind: 'proxy', path: '/broken', retry: { maxAttempts: 2, initialMs: 3_600_000 } } } });
    await engine.publishVersion(ENVS[0]!, backoff);
    await engine.start({ logicId: backoff.logicId, input: {}, env: ENVS[0] });
    await engine.workers.drain();
    // work nobody has claimed yet: the runnable queue
    for (let i = 0; i < 3; i++) await engine.start({ logicId: flows[0]!.logicId, input: {}, env: ENVS[0] });

    const scraped = await engine.metrics.render();
    expect(scraped.contentType).toMatch(/^text\/plain/);
    const samples = parse(scraped.body);
    expect(samples.every((s) => s.name.startsWith('flow_'))).toBe(true);

    const live = await sql<{ k: string; n: number }>(
      `SELECT env_id || '|' || logic_id || '|' || state AS k, count(*)::int AS n FROM workflows
       WHERE state NOT IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered') GROUP BY 1`,
    );
    expect(table(samples, 'flow_instances', ['env', 'logic_id', 'state'])).toEqual(Object.fromEntries(live.map((r) => [r.k, r.n])));
    const ended = await sql<{ k: string; n: number }>(
      `SELECT env_id || '|' || logic_id || '|' || state AS k, count(*)::int AS n FROM workflows
       WHERE state IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered') GROUP BY 1`,
    );
    expect(table(samples, 'flow_instances_ended_total', ['env', 'logic_id', 'state'])).toEqual(Object.fromEntries(ended.map((r) => [r.k, r.n])));

    const parked = table(samples, 'flow_parked_instances', ['env', 'reason']);
    for (const env of ENVS) {
      // one decision flow + two children on a decision; one 202 step; one P2D delay; one parent on its children
      expect([parked[`${env}|decision`], parked[`${env}|callback`], parked[`${env}|delay`], parked[`${env}|children`]]).toEqual([3, 1, 1, 1]);
    }
    const [waiting] = await sql<{ n: number }>(`SELECT count(*)::int AS n FROM workflows WHERE state = 'waiting'`);
    expect(Object.values(parked).reduce((a, b) => a + b, 0)).toBe(waiting!.n);

    const [runnable] = await sql<{ n: number; age: number }>(
      `SELECT count(*)::int AS n, extract(epoch FROM now() - min(run_at))::float8 AS age FROM workflows WHERE state = 'pending' AND run_at <= now()`,
    );
    expect(runnable!.n).toBe(3);
    expect(table(samples, 'flow_runnable_instances', [])).toEqual({ '': 3 });
    const age = table(samples, 'flow_oldest_runnable_age_seconds', [])['']!;
    expect(age).toBeGreaterThan(0);
    expect(age).toBeLessThanOrEqual(runnable!.age); // read before the SQL above, so no older

    const retried = await sql<{ kind: string; n: number }>(
      `SELECT s.kind, count(*)::int AS n FROM step_runs s WHERE s.state = 'failed' AND EXISTS (
         SELECT 1 FROM step_runs r WHERE r.workflow_id = s.workflow_id AND r.step = s.step AND r.kind = s.kind
           AND r.generation = s.generation AND r.attempt = s.attempt + 1) GROUP BY s.kind`,
    );
    expect(table(samples, 'flow_retries_total', ['kind'])).toEqual(Object.fromEntries(retried.map((r) => [r.kind, r.n])));
    expect(table(samples, 'flow_retries_total', ['kind'])).toEqual({ step: 3, compensation: 2 });

    const dead = await sql<{ k: string; n: number }>(`SELECT env_id || '|' || logic_id AS k, count(*)::int AS n FROM workflows WHERE state = 'dead_lettered' GROUP BY 1`);
    expect(dead).toHaveLength(2);
    expect(table(samples, 'flow_dead_letters_total', ['env', 'logic_id'])).toEqual(Object.fromEntries(dead.map((r) => [r.k, r.n])));

    const comp = await sql<{ state: string; n: number }>(`SELECT state, count(*)::int AS n FROM step_runs WHERE kind = 'compensation' GROUP BY state`);
    const compensations = table(samples, 'flow_compensations_total', ['outcome']);
    expect(compensations['succeeded']).toBe(comp.find((r) => r.state === 'succeeded')?.n);
    expect((compensations['failed_transient'] ?? 0) + (compensations['failed_permanent'] ?? 0)).toBe(comp.find((r) => r.state === 'failed')?.n);

    const proxied = await sql<{ n: number }>(`SELECT count(*)::int AS n FROM step_runs WHERE kind = 'step' AND step LIKE 'p\\_%' AND state <> 'running'`);
    const durations = samples.filter((s) => s.name === 'flow_step_duration_seconds_count' && s.labels['kind'] === 'proxy');
    expect(durations.reduce((a, s) => a + s.value, 0)).toBe(proxied[0]!.n);

    const slept = await sql<{ n: number }>(`SELECT count(*)::int AS n FROM step_runs WHERE step = 'd_sleep' AND state = 'succeeded'`);
    expect(slept[0]!.n).toBe(ENVS.length);
    expect(table(samples, 'flow_timer_lateness_seconds_count', ['purpose'])).toEqual({ delay: slept[0]!.n });
  });

  it('counts instances ended from outside the worker loop: by a callback, a decision, a force-complete', async () => {
    const env = 'metrics-outside';
    let token = '';
    const svc2 = await new FakeService()
      .on('/later', (r) => {
        token = r.headers['x-flow-resume-token']!;
        return { status: 202, body: { status: 'waiting' } };
      })
      .on('/broken', () => ({ status: 500 }))
      .listen();
    const other = new Engine({ db: getDb(), executors: { handlers: new Map([['TEST', { url: svc2.url }]]) } });
    try {
      const later = uniqueLogic({ start: 'p_later', steps: { p_later: { kind: 'proxy', path: '/later' } } });
      const ask = uniqueLogic({ start: 'ask', steps: { ask: { kind: 'decision', options: ['go'] } } });
      const broken = uniqueLogic({ start: 'p_broken', steps: { p_broken: { kind: 'proxy', path: '/broken', retry: { maxAttempts: 1 } } } });
      for (const doc of [later, ask, broken]) await other.publishVersion(env, doc);
      const a = await other.start({ logicId: later.logicId, input: {}, env });
      const b = await other.start({ logicId: ask.logicId, input: {}, env });
      const c = await other.start({ logicId: broken.logicId, input: {}, env });
      await settle(other);
      const actor = { subject: 'ops@example.com', scopes: ['flow:admin'] };
      await other.complete(token, { output: { done: true } });
      await other.resume(b.id, { step: 'ask', option: 'go', approver: actor }, { env });
      await other.ops.forceComplete(c.id, { step: 'p_broken', output: {} }, { actor, env });
      await settle(other);
      for (const id of [a.id, b.id, c.id]) expect((await other.get(id, env)).state).toBe('completed');
      const ended = table(parse((await other.metrics.render()).body), 'flow_instances_ended_total', ['env', 'logic_id', 'state']);
      expect([later, ask, broken].map((d) => ended[`${env}|${d.logicId}|completed`])).toEqual([1, 1, 1]);
    } finally {
      await other.close();
      await svc2.close();
    }
  });

  it('a second engine on the same database reports the same database gauges', async () => {
    const other = new Engine({ db: getDb() });
    try {
      const pick = (body: string) => parse(body).filter((s) => ['flow_instances', 'flow_parked_instances', 'flow_runnable_instances'].includes(s.name));
      expect(pick((await other.metrics.render()).body)).toEqual(pick((await engine.metrics.render()).body));
    } finally {
      await other.close();
    }
  });
});
