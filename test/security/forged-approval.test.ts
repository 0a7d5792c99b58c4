import { afterAll, beforeAll, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import type { Api } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { testApi, token } from '../api/support.ts';
import { describeEachDriver } from '../support/db.ts';

/**
 * A decision is answered only by an approver: `flow:decide` for the definition and the step's
 * `approverScope`. An operator verb that would settle the decision instead — force-complete on
 * it, repair to it, or a rewind that jumps past it — needs the same scopes, on every path (one
 * call, its dry run, a bulk job).
 */

const ENV = 'sec-env';

const approval: LogicVersion = makeLogic({
  logicId: 'sec.approval',
  start: 'approve',
  steps: {
    approve: { kind: 'decision', options: ['approve', 'reject'], approverScope: 'payments:approve', next: 'done' },
    done: { kind: 'pass' },
  },
});

/** Fails before its decision: a rewind could jump past `approve` straight to `pay`. */
const failsFirst: LogicVersion = makeLogic({
  logicId: 'sec.fails-first',
  start: 'check',
  steps: {
    check: { kind: 'choice', branches: [{ when: 'false', next: 'approve' }], otherwise: 'nope' },
    nope: { kind: 'fail', code: 'NOPE' },
    approve: { kind: 'decision', options: ['approve', 'reject'], approverScope: 'payments:approve', next: 'pay' },
    pay: { kind: 'pass' },
  },
});

describeEachDriver('decisions only by approvers', (getDb) => {
  let engine: Engine;
  let api: Api;

  beforeAll(async () => {
    engine = new Engine({ db: getDb(), env: ENV, executors: { handlers: new Map() } });
    api = await testApi(engine);
    await engine.publishVersion(ENV, approval);
    await engine.publishVersion(ENV, failsFirst);
  });
  afterAll(async () => {
    await api.close();
    await engine.close();
  });

  async function post(url: string, scope: string, payload: object) {
    const headers = { authorization: `Bearer ${await token({ envs: [ENV], scope, sub: 'mallory' })}` };
    return api.app.inject({ method: 'POST', url: `/v1/envs/${ENV}${url}`, headers, payload });
  }

  it('force-complete of a waiting decision needs flow:decide and the approverScope, dry run or not', async () => {
    const { id } = await engine.start({ logicId: approval.logicId, input: {}, env: ENV });
    const forged = { reason: 'forge', step: 'approve', output: { option: 'approve', approvedBy: 'ceo' } };
    for (const dryRun of [true, false]) {
      const bare = await post(`/workflows/${id}/force-complete`, 'flow:force-complete', { ...forged, dryRun });
      expect(bare.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(bare.json()).toMatchObject({ status: 403, code: 'FLOW_SCOPE_MISSING' });
      expect(bare.json().detail).toContain('flow:decide');
      const noApprover = await post(`/workflows/${id}/force-complete`, 'flow:force-complete flow:decide', { ...forged, dryRun });
      expect(noApprover.json()).toMatchObject({ status: 403, code: 'FLOW_APPROVER_FORBIDDEN' });
    }
    expect((await engine.get(id, ENV)).state).toBe('waiting');
    const approver = await post(`/workflows/${id}/force-complete`, 'flow:force-complete flow:decide payments:approve', forged);
    expect(approver.statusCode).toBe(200);
    expect(approver.json().state).toBe('completed');
  });

  it('repair to a decision step, or past one never answered, needs the approver scopes', async () => {
    const { id } = await engine.start({ logicId: failsFirst.logicId, input: {}, env: ENV });
    expect((await engine.get(id, ENV)).state).toBe('failed');
    const jump = await post(`/workflows/${id}/repair`, 'flow:repair', { reason: 'skip it', rewindTo: 'pay' });
    expect(jump.json()).toMatchObject({ status: 403, code: 'FLOW_SCOPE_MISSING' });
    const onIt = await post(`/workflows/${id}/repair`, 'flow:repair flow:decide', { reason: 'reshape it', rewindTo: 'approve', input: { amount: 1 } });
    expect(onIt.json()).toMatchObject({ status: 403, code: 'FLOW_APPROVER_FORBIDDEN' });
    const replayPast = await post(`/workflows/${id}/replay`, 'flow:replay', { reason: 'skip it', step: 'pay' });
    expect(replayPast.json()).toMatchObject({ status: 403, code: 'FLOW_SCOPE_MISSING' });
    expect((await engine.get(id, ENV)).state).toBe('failed');
    // an earlier step asks the decision again: no approver scope needed
    const back = await post(`/workflows/${id}/repair`, 'flow:repair', { reason: 'again', rewindTo: 'check' });
    expect(back.statusCode).toBe(200);
  });

  it('a bulk replay past an unanswered decision fails that instance with the same refusal', async () => {
    const { id } = await engine.start({ logicId: failsFirst.logicId, input: {}, env: ENV, correlationId: 'bulk' });
    const job = await post('/bulk/replay', 'flow:replay', { reason: 'skip all', step: 'pay', filter: { logicId: failsFirst.logicId, state: 'failed' } });
    expect(job.statusCode).toBe(202);
    let done = job.json();
    while (done.state === 'running') {
      const res = await api.app.inject({
        url: `/v1/envs/${ENV}/bulk/${done.id}`,
        headers: { authorization: `Bearer ${await token({ envs: [ENV], scope: 'flow:read' })}` },
      });
      done = res.json();
    }
    expect(JSON.stringify(done)).toContain('FLOW_SCOPE_MISSING');
    expect((await engine.get(id, ENV)).state).toBe('failed');
  });
});
