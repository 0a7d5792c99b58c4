import { expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import { claimWorkflows, type EnvWeights } from '../../engine/store/claim-workflows.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { describeEachDriver } from '../support/db.ts';
import { uniqueLogic } from '../support/engine.ts';

/**
 * The claim's order (migration 0028): within an env, higher priority first, then the earliest
 * due; across envs, turns in which an env of weight w gets w instances. Instances are started
 * with no worker running and claimed by hand, so the order is the claim's alone.
 */
describeEachDriver('claim order', (getDb) => {
  const proxyLogic = (priority?: number) =>
    uniqueLogic({ domain: 'svc', start: 'call', ...(priority === undefined ? {} : { priority }), steps: { call: { kind: 'proxy', path: '/x' } } });

  /** Makes every unclaimed instance due at once, so only priority and weights order them. */
  const allDue = (engine: Engine, envs: string[]) =>
    asScheduler(engine.db, async (c) => {
      await c.query(`UPDATE workflows SET run_at = now() - interval '1 second', lease_token = NULL, lease_expires_at = NULL, state = 'pending' WHERE state IN ('pending', 'processing') AND env_id = ANY($1)`, [envs]);
      // the other suites' instances in this schema are not this test's: out of the claim's way
      await c.query(`UPDATE workflows SET run_at = now() + interval '1 day' WHERE state = 'pending' AND NOT env_id = ANY($1)`, [envs]);
    });

  it('takes the higher priority first within an env: the start request over the definition, the definition over 0', async () => {
    const engine = new Engine({ db: getDb(), env: 'prio' });
    const plain = proxyLogic();
    const urgent = proxyLogic(7);
    await engine.publish(plain);
    await engine.publish(urgent);
    const low = await engine.start({ logicId: plain.logicId, input: {}, priority: -5 });
    const normal = await engine.start({ logicId: plain.logicId, input: {} });
    const byDefinition = await engine.start({ logicId: urgent.logicId, input: {} });
    const byRequest = await engine.start({ logicId: plain.logicId, input: {}, priority: 50 });
    await allDue(engine, ['prio']);
    const order: string[] = [];
    for (let i = 0; i < 4; i++) {
      const [one] = await claimWorkflows(engine.db.pool, { limit: 1, leaseMs: 60_000 });
      order.push(one!.instance.id);
    }
    await engine.close();
    expect(order).toEqual([byRequest.id, byDefinition.id, normal.id, low.id]);
  });

  it('gives an env of weight w w instances per turn', async () => {
    const engine = new Engine({ db: getDb(), env: 'w-prod' });
    const logic = proxyLogic();
    for (const env of ['w-prod', 'w-staging']) {
      await engine.publish(logic, env);
      for (let i = 0; i < 8; i++) await engine.start({ logicId: logic.logicId, input: { i }, env });
    }
    const claimOf = async (weights?: EnvWeights) => {
      await allDue(engine, ['w-prod', 'w-staging']);
      const rows = await claimWorkflows(engine.db.pool, { limit: 8, leaseMs: 60_000, ...(weights ? { weights } : {}) });
      return rows.filter((r) => r.instance.env === 'w-prod').length;
    };
    const even = await claimOf();
    const weighted = await claimOf({ 'w-prod': 3 });
    await engine.close();
    expect(even).toBe(4);
    expect(weighted).toBe(6);
  });
});
