import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { LogicVersion, StepDef } from '../contracts/index.ts';
import { onOutcome } from '../engine/core/flow.ts';
import { Engine } from '../engine/runtime/engine.ts';
import { commitTransition } from '../engine/store/commit-transition.ts';
import type { Db } from '../engine/store/db.ts';
import { loadWorkflow } from '../engine/store/load-workflow.ts';
import { inEnv } from '../engine/store/tx.ts';
import { makeLogic } from '../test/contracts/helpers.ts';

/**
 * Latency of one step's commit alone, one client: a proxy step's outcome `output` committed with
 * commit_transition() (journalled, as the engine does), preparing the next attempt. No worker
 * runs: the lease is taken by hand, so nothing else touches the database meanwhile.
 * Returns the sorted samples in ms.
 */
export async function stepCommitLatencies(db: Db, opts: { workflows: number; steps: number; output: unknown }): Promise<number[]> {
  const steps: Record<string, StepDef> = {};
  for (let i = 0; i < opts.steps; i++) {
    steps[`s${i}`] = { kind: 'proxy', path: '/step', ...(i + 1 < opts.steps ? { next: `s${i + 1}` } : {}) };
  }
  const logic: LogicVersion = makeLogic({ logicId: 'bench.commit', domain: 'bench', start: 's0', steps });
  const engine = new Engine({ db });
  await engine.publish(logic);
  const samples: number[] = [];
  for (let w = 0; w < opts.workflows; w++) {
    const { id } = await engine.start({ logicId: logic.logicId, input: {} });
    const token = randomUUID();
    await db.pool.query(`UPDATE workflows SET state = 'processing', lease_token = $2, row_version = row_version + 1 WHERE id = $1`, [id, token]);
    let current = (await inEnv(db, 'default', (c) => loadWorkflow(c, id)))!;
    while (current.instance.state === 'processing') {
      const outcome = { status: 'succeeded', output: opts.output } as const;
      // goOn, as a worker that holds the lease: the next attempt is prepared and the row stays `processing`
      const t = await onOutcome(logic, current.instance, outcome, true);
      const s0 = performance.now();
      await commitTransition(db, current, t, { keepLease: { token, ttlMs: 30_000 }, event: { type: 'outcome', outcome } });
      samples.push(performance.now() - s0);
      current = { instance: t.instance, rowVersion: current.rowVersion + 1, leaseToken: token, wakes: [] };
    }
  }
  await engine.close();
  return samples.sort((a, b) => a - b);
}
