import type { LogicVersion } from '../../contracts/index.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import type { Db } from '../../engine/store/db.ts';
import { advanceClock } from '../../engine/store/timers.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { makeLogic } from '../contracts/helpers.ts';
import type { FakeService } from './fake-service.ts';

export const OPERATOR = { actor: { subject: 'ops@example.com', scopes: ['flow:admin'] } };

/** An engine on `db` whose `test` handler points at the fake service; workers are driven by `drain()`. */
export function testEngine(db: Db, svc: FakeService): Engine {
  return new Engine({ db, env: 'test-env', executors: { handlers: new Map([['TEST', { url: svc.url }]]) } });
}

/**
 * Runs every due timer and runnable instance to rest, like a worker would, without sleeping:
 * retry backoff is fast-forwarded (delays and deadlines are not; `advance` moves those).
 */
export async function settle(engine: Engine): Promise<void> {
  for (let round = 0; round < 50; round++) {
    await engine.workers.drain();
    const res = await engine.db.pool.query<{ ms: number | null }>(
      `SELECT extract(epoch FROM min(run_at) - now()) * 1000 AS ms FROM workflows
       WHERE state IN ('pending', 'compensating') AND lease_expires_at IS NULL`,
    );
    const ms = res.rows[0]?.ms;
    if (ms === null || ms === undefined) return;
    await asScheduler(engine.db, (c) => c.query(`UPDATE workflows SET run_at = now() WHERE state IN ('pending', 'compensating')`));
  }
}

/** Moves the database's notion of "due" forward by `ms` and settles. */
export async function advance(engine: Engine, ms: number): Promise<void> {
  await asScheduler(engine.db, (c) => advanceClock(c, ms));
  await settle(engine);
}

let counter = 0;
/** A fresh logicId per call, so tests in one schema never collide. */
export function uniqueLogic(parts: Omit<Partial<LogicVersion>, 'logicId'> & Pick<LogicVersion, 'steps' | 'start'>): LogicVersion {
  return makeLogic({ ...parts, logicId: `t.flow${++counter}` });
}

/** `n` proxy steps in a row, each a POST of the instance's input to handler `svc` at `/call`. */
export function callChain(n: number): LogicVersion {
  return uniqueLogic({
    start: 's0',
    steps: Object.fromEntries(
      Array.from({ length: n }, (_, i) => [`s${i}`, { kind: 'proxy', handler: 'svc', path: '/call', input: 'input', next: i + 1 < n ? `s${i + 1}` : null }]),
    ) as never,
  });
}
