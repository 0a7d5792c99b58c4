import type { LogicVersion } from '../../contracts/index.ts';
import type { Db } from '../../engine/store/db.ts';
import { makeLogic } from '../contracts/helpers.ts';
import type { Reply } from './fake-service.ts';
import type { DeliveryInfo, IdempotencyLedger } from './idempotency-ledger.ts';

/**
 * The chaos soak's workload: payments (proxy, func, a decision, http, two compensations), polling
 * loops (pass, proxy, delay, choice back), and fan-outs (children with a delay), and the invariant
 * checks that must hold however the run was disturbed. Each check returns violations as readable
 * lines; the soak requires none.
 */
export type Mode = 'ok' | 'decline' | 'approve' | 'flaky';
export const RETRY = { maxAttempts: 8, initialMs: 20, maxMs: 200 };

export function soakLogics(moduleHash: string, httpUrl: string): { pay: LogicVersion; loop: LogicVersion; item: LogicVersion; fan: LogicVersion } {
  const pay = makeLogic({
    logicId: 'soak.pay',
    start: 'reserve',
    modules: { risk: { sha256: moduleHash, imports: { lookup: { path: '/lookup' } } } },
    steps: {
      reserve: {
        kind: 'proxy',
        path: '/reserve',
        input: '{ "n": input.n, "mode": input.mode }',
        retry: RETRY,
        compensate: { kind: 'proxy', path: '/release', retry: RETRY },
        next: 'hold',
      },
      hold: {
        kind: 'proxy',
        path: '/hold',
        input: '{ "n": input.n, "mode": input.mode }',
        retry: RETRY,
        compensate: { kind: 'proxy', path: '/unhold', retry: RETRY },
        next: 'score',
      },
      score: { kind: 'func', module: 'risk', input: '{ "n": input.n, "mode": input.mode }', retry: RETRY, next: 'route' },
      route: { kind: 'choice', branches: [{ when: "input.mode = 'approve'", next: 'approve' }], otherwise: 'charge' },
      approve: { kind: 'decision', options: ['go', 'stop'], next: 'afterApprove' },
      afterApprove: { kind: 'choice', branches: [{ when: "decision.option = 'go'", next: 'charge' }], otherwise: 'stopped' },
      stopped: { kind: 'fail', code: 'STOPPED' },
      charge: { kind: 'proxy', path: '/charge', input: '{ "n": input.n, "mode": input.mode }', retry: RETRY, next: 'audit' },
      audit: { kind: 'http', method: 'POST', url: `${httpUrl}/notify`, input: '{ "n": input.n, "mode": input.mode }', retry: RETRY },
    },
  });
  const loop = makeLogic({
    logicId: 'soak.loop',
    start: 'count',
    steps: {
      count: { kind: 'pass', input: '{ "k": ($exists(steps.count.k) ? steps.count.k : 0) + 1 }', next: 'poll' },
      poll: { kind: 'proxy', path: '/poll', input: '{ "n": input.n, "k": steps.count.k, "mode": input.mode }', retry: RETRY, next: 'wait' },
      wait: { kind: 'delay', duration: 'PT0.5S', next: 'again' },
      again: { kind: 'choice', branches: [{ when: 'steps.count.k < 3', next: 'count' }], otherwise: 'done' },
      done: { kind: 'pass' },
    },
  });
  const item = makeLogic({
    logicId: 'soak.item',
    start: 'book',
    steps: {
      book: { kind: 'proxy', path: '/reserve', input: '{ "n": input.n, "mode": input.mode }', retry: RETRY, compensate: { kind: 'proxy', path: '/release', retry: RETRY }, next: 'pause' },
      pause: { kind: 'delay', duration: 'PT0.3S' },
    },
  });
  const fan = makeLogic({
    logicId: 'soak.fan',
    start: 'fan',
    steps: {
      fan: { kind: 'children', logicId: 'soak.item', items: 'input.items', itemInput: '{ "n": item, "mode": input.mode }', failurePolicy: 'all_settled', next: 'notify' },
      notify: { kind: 'proxy', path: '/notify', input: '{ "n": input.n, "mode": input.mode }', retry: RETRY },
    },
  });
  return { pay, loop, item, fan };
}

/** The owning service's operations: `flaky` answers 503 twice per key first, `decline` refuses the charge. */
export function soakOperations(): Record<string, (body: unknown, info: DeliveryInfo) => Reply> {
  const transients = new Map<string, number>();
  const flaky = (body: unknown, info: DeliveryInfo): Reply | null => {
    if ((body as { mode?: Mode } | null)?.mode !== 'flaky') return null;
    const left = transients.get(info.key) ?? 2;
    transients.set(info.key, left - 1);
    return left > 0 ? { status: 503, body: { message: 'try again' } } : null;
  };
  const ok = (what: string) => (body: unknown, info: DeliveryInfo): Reply => flaky(body, info) ?? { status: 200, body: { [what]: true, at: info.attempt } };
  return {
    '/reserve': ok('reserved'),
    '/release': ok('released'),
    '/hold': ok('held'),
    '/unhold': ok('unheld'),
    '/lookup': ok('score'),
    '/poll': ok('polled'),
    '/notify': ok('notified'),
    '/charge': (body, info) =>
      flaky(body, info) ?? ((body as { mode: Mode }).mode === 'decline' ? { status: 422, body: { message: 'card declined' } } : { status: 200, body: { charged: true } }),
  };
}

/** A call whose key already has a committed success and no attempt open under it: a committed step run again. */
/** The attempt that succeeded, per `kind|idempotency key`: a later call with a higher attempt was prepared after the commit. */
export async function succeededAttempts(db: Db): Promise<Map<string, number>> {
  const res = await db.pool.query<{ k: string; attempt: number }>(
    `SELECT kind || '|' || idempotency_key AS k, max(attempt)::int AS attempt FROM step_runs WHERE state = 'succeeded' AND idempotency_key IS NOT NULL GROUP BY 1`,
  );
  return new Map(res.rows.map((r) => [r.k, r.attempt]));
}

export async function committedAndClosed(db: Db, info: DeliveryInfo): Promise<boolean> {
  const res = await db.pool.query<{ done: boolean; open: boolean }>(
    `SELECT bool_or(state = 'succeeded') AS done, bool_or(state IN ('running', 'parked')) AS open
       FROM step_runs WHERE idempotency_key = $1 AND kind = $2`,
    [info.key.replace(/:call:\d+$/, ''), info.kind],
  );
  const r = res.rows[0];
  return r?.done === true && r.open !== true;
}

interface Run {
  workflow_id: string;
  seq: number;
  step: string;
  kind: 'step' | 'compensation';
  attempt: number;
  generation: number;
  state: string;
  idempotency_key: string | null;
}

/**
 * The invariants over the store and the service's ledger:
 * - each key, as sent, is applied at most once, and succeeds on one visit only: a loop visit
 *   that reuses a key gets the first visit's answer replayed, one applied effect for two visits;
 * - compensations ran in the exact reverse of the registrations the path made (first attempts of
 *   compensable steps, one per visit, less those the service refused outright), uncompacted;
 * - every instance ended, or waits for a stated reason (a decision, an open child, a due timer).
 */
export async function storeViolations(db: Db, ledger: IdempotencyLedger<Reply>, compensable: Set<string>): Promise<string[]> {
  const out: string[] = [];
  for (const [key, n] of ledger.applications) if (n > 1) out.push(`key ${key} applied ${n} times`);
  const sent = new Set(ledger.deliveries.map((d) => d.key));
  const refused = new Set(ledger.deliveries.filter((d) => d.outcome === 'refused').map((d) => d.key));
  const runs = (await db.pool.query<Run>('SELECT workflow_id, seq, step, kind, attempt, generation, state, idempotency_key FROM step_runs ORDER BY workflow_id, seq')).rows;
  const byWf = new Map<string, Run[]>();
  for (const r of runs) byWf.set(r.workflow_id, [...(byWf.get(r.workflow_id) ?? []), r]);
  const wfs = (await db.pool.query<{ id: string; state: string; logic_id: string; current_step: string | null }>('SELECT id, state, logic_id, current_step FROM workflows')).rows;
  const states = new Map(wfs.map((w) => [w.id, w]));
  const cancels = new Map<string, boolean[]>();
  const audit = await db.pool.query<{ id: string; compensate: boolean | null }>(
    `SELECT workflow_id AS id, (args->>'compensate')::boolean AS compensate FROM audit WHERE verb = 'cancel' ORDER BY id`,
  );
  for (const r of audit.rows) cancels.set(r.id, [...(cancels.get(r.id) ?? []), r.compensate === true]);
  for (const [id, list] of byWf) {
    // visits: a step's attempt 1 opens a visit; successes per key must equal one per visit
    const successesPerKey = new Map<string, number>();
    for (const r of list) {
      if (r.kind === 'step' && r.state === 'succeeded' && r.idempotency_key !== null && sent.has(r.idempotency_key)) {
        successesPerKey.set(r.idempotency_key, (successesPerKey.get(r.idempotency_key) ?? 0) + 1);
      }
    }
    for (const [key, n] of successesPerKey) if (n > 1) out.push(`key ${key} sent on ${n} visits that each succeeded (applied ${ledger.applications.get(key) ?? 0}×)`);
    // a permanent refusal withdraws the registration: the call took no effect
    const registered = list.filter(
      (r) => r.kind === 'step' && r.attempt === 1 && !refused.has(r.idempotency_key ?? '') && compensable.has(`${states.get(id)?.logic_id}:${r.step}`),
    );
    const undone = list.filter((r) => r.kind === 'compensation' && r.state === 'succeeded').map((r) => `${r.step}@${r.generation}`);
    const expected = registered.map((r) => `${r.step}@${r.generation}`).reverse();
    const wf = states.get(id)!;
    // the unwinding must finish when it ended compensated, or cancelled by one cancel that asked
    // to compensate; a later cancel (or one without compensate) stops it where it is
    const verbs = cancels.get(id) ?? [];
    const complete = wf.state === 'compensated' || (wf.state === 'cancelled' && verbs.length === 1 && verbs[0] === true);
    const ok = complete ? undone.join() === expected.join() : undone.join() === expected.slice(0, undone.length).join();
    if (undone.length > 0 && !ok) out.push(`${id} (${wf.state}) undid ${undone.join(',')}; the path registered ${expected.join(',')} (last first)`);
  }
  const parked = await db.pool.query<{ id: string; state: string; current_step: string | null; reason: string | null }>(
    `SELECT w.id, w.state, w.current_step,
            CASE WHEN EXISTS (SELECT 1 FROM timers t WHERE t.workflow_id = w.id) THEN 'timer'
                 WHEN EXISTS (SELECT 1 FROM workflows c WHERE c.parent_id = w.id AND c.state NOT IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered')) THEN 'children'
                 WHEN w.current_step = 'approve' THEN 'decision' END AS reason
       FROM workflows w WHERE w.state NOT IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered')`,
  );
  for (const r of parked.rows) {
    if (r.state !== 'waiting' || r.reason === null) out.push(`${r.id} is ${r.state} at ${r.current_step} with no reason to wait`);
  }
  return out;
}
