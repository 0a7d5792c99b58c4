import { expect, it } from 'vitest';
import { begin, onOutcome } from '../../engine/core/flow.ts';
import { initialCtx, type Instance } from '../../engine/core/instance.ts';
import { onCallback } from '../../engine/core/wake.ts';
import { makeLogic } from '../contracts/helpers.ts';

/**
 * The core returns the final state, and decides the hand-over in one place (Draft.done): a
 * prepared effect is `processing` only for a caller that holds the lease and goes on; a new
 * instance, a completion, a stopping worker and a retry after backoff leave it `pending`.
 */
const logic = makeLogic({
  start: 'a',
  steps: {
    a: { kind: 'proxy', path: '/a', next: 'b' },
    b: { kind: 'proxy', path: '/b', retry: { maxAttempts: 2 } },
  },
});
const fresh: Instance = {
  id: 'wf',
  env: 'e',
  domain: 'test',
  logicId: logic.logicId,
  version: 1,
  logicHash: logic.hash,
  state: 'pending',
  input: {},
  output: null,
  currentStep: 'a',
  error: null,
  generation: 0,
  correlationId: null,
  parentId: null,
  parentSeq: null,
  branchIndex: null,
  ctx: initialCtx(),
};

it('a prepared effect is processing only for a worker that goes on; everyone else hands it over as pending', async () => {
  const started = await begin(logic, fresh);
  expect(started.instance.state).toBe('pending');
  const claimed = { ...started.instance, state: 'processing' as const };
  const ok = { status: 'succeeded' as const, output: {} };
  expect((await onOutcome(logic, claimed, ok, true)).instance.state).toBe('processing');
  expect((await onOutcome(logic, claimed, ok, false)).instance.state).toBe('pending');
  const atB = (await onOutcome(logic, claimed, ok, true)).instance;
  const transient = { status: 'failed' as const, retryable: true, error: { code: 'HTTP_503', message: 'x' } };
  const retried = await onOutcome(logic, atB, transient, true);
  expect([retried.instance.state, retried.runAfterMs !== null]).toEqual(['pending', true]);
  // a completion of a parked step hands the next effect over: no worker holds the instance
  const parked = (await onOutcome(logic, claimed, { status: 'parked' }, true)).instance;
  expect((await onCallback(logic, parked, parked.ctx.running!.seq, ok)).instance.state).toBe('pending');
});
