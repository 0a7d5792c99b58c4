import { describe, expect, it } from 'vitest';
import type { LogicVersion, StepDef } from '../../contracts/index.ts';
import { begin, onOutcome } from '../../engine/core/flow.ts';
import { createInstance } from '../../engine/core/instance.ts';
import { previewContinue } from '../../engine/core/preview.ts';
import { compatibility, type InstanceShape } from '../../engine/core/compatibility.ts';
import { outputAccepts } from '../../engine/core/output-shapes.ts';
import { makeLogic } from '../contracts/helpers.ts';

const STEPS: Record<string, StepDef> = {
  reserve: { kind: 'proxy', path: '/reserve', next: 'notify', onError: 'apologise' },
  notify: { kind: 'proxy', path: '/notify', input: '{ "res": steps.reserve.id }' },
  // reached when reserve failed: its output is the error, and a probe asks whether there is one
  apologise: { kind: 'proxy', path: '/sorry', input: '{ "tried": $exists(steps.reserve) }' },
};
const v1 = makeLogic({ logicId: 'core.pay', version: 1, start: 'reserve', steps: STEPS });
const atReserve: InstanceShape = { state: 'pending', currentStep: 'reserve', running: 'step', generation: 0, outputs: [], compensations: [] };

describe('compatibility of a shape (pure)', () => {
  it('a buffered message is untaken only where N would take it ahead and the candidate would not: renamed steps that keep the name take it', () => {
    const waits = (version: number, step: string, message: string) =>
      makeLogic({ logicId: 'core.msg', version, start: 'approve', steps: { approve: { kind: 'decision', options: ['ok'], next: step }, [step]: { kind: 'waitFor', message } } });
    const n = waits(1, 'settle', 'funds.settled');
    const parked: InstanceShape = { state: 'waiting', currentStep: 'approve', running: 'step', generation: 0, outputs: [], compensations: [], messages: ['funds.settled'] };
    expect(compatibility(n, waits(2, 'settlement', 'funds.settled'), parked, { settle: 'settlement' }).verdict).toBe('safe');
    expect(compatibility(n, waits(2, 'settlement', 'ledger.settled'), parked, { settle: 'settlement' }).reasons).toEqual([
      { code: 'FLOW_COMPAT_MESSAGE_UNTAKEN', step: 'settle', message: expect.stringContaining('funds.settled') },
    ]);
    // a message N would not take either is stranded already: not the candidate's doing
    expect(compatibility(n, waits(2, 'settle', 'funds.settled'), { ...parked, messages: ['other'] }).verdict).toBe('safe');
  });

  it('a step the candidate inserts before the reader is produced on every path there: safe', () => {
    const v2 = makeLogic({
      logicId: 'core.pay',
      version: 2,
      start: 'reserve',
      steps: {
        ...STEPS,
        reserve: { ...STEPS['reserve']!, next: 'fraud' } as StepDef,
        fraud: { kind: 'proxy', path: '/fraud', next: 'notify' },
        notify: { kind: 'proxy', path: '/notify', input: '{ "res": steps.reserve.id, "score": steps.fraud.score }' },
      },
    });
    expect(compatibility(v1, v2, atReserve)).toEqual({ verdict: 'safe', reasons: [] });
  });

  it('a read the candidate can reach past the producer (its onError route) is unsafe', () => {
    const v2 = makeLogic({
      logicId: 'core.pay',
      version: 2,
      start: 'reserve',
      steps: {
        ...STEPS,
        reserve: { ...STEPS['reserve']!, next: 'fraud' } as StepDef,
        fraud: { kind: 'proxy', path: '/fraud', next: 'notify', onError: 'notify' },
        notify: { kind: 'proxy', path: '/notify', input: '{ "res": steps.reserve.id, "score": steps.fraud.score }' },
      },
    });
    expect(compatibility(v1, v2, atReserve).reasons.map((r) => [r.code, r.step, r.readBy])).toEqual([['FLOW_COMPAT_OUTPUT_MISSING', 'fraud', 'steps.notify.input']]);
  });

  it('a call under way that the candidate sends elsewhere is unsafe; the same call, or none under way, is not', () => {
    const moved = makeLogic({ logicId: 'core.pay', version: 2, start: 'reserve', steps: { ...STEPS, reserve: { ...STEPS['reserve']!, path: '/reserve-v2' } as StepDef } });
    expect(compatibility(v1, moved, atReserve).reasons.map((r) => [r.code, r.step])).toEqual([['FLOW_COMPAT_CALL_CHANGED', 'reserve']]);
    expect(compatibility(v1, moved, { ...atReserve, running: null }).verdict).toBe('safe');
    const retried = makeLogic({ logicId: 'core.pay', version: 2, start: 'reserve', steps: { ...STEPS, reserve: { ...STEPS['reserve']!, retry: { maxAttempts: 9 } } as StepDef } });
    expect(compatibility(v1, retried, atReserve).verdict).toBe('safe');
    // with a rename map the call is looked for under the step's new name
    const renamed = makeLogic({ logicId: 'core.pay', version: 2, start: 'hold', steps: { hold: STEPS['reserve']!, notify: STEPS['notify']!, apologise: STEPS['apologise']! } });
    const codes = compatibility(v1, renamed, atReserve, { reserve: 'hold' }).reasons.map((r) => r.code);
    expect(codes).not.toContain('FLOW_COMPAT_CALL_CHANGED');
    expect(codes).not.toContain('FLOW_COMPAT_STEP_MISSING');
    expect(compatibility(v1, renamed, atReserve).reasons.map((r) => r.code)).toContain('FLOW_COMPAT_STEP_MISSING');
  });

  it('a read N already leaves missing, and a $exists probe, are not reasons', () => {
    const v2 = makeLogic({ logicId: 'core.pay', version: 2, start: 'reserve', steps: { ...STEPS, apologise: { ...STEPS['apologise']!, next: 'notify' } as StepDef } });
    const v1b = makeLogic({ logicId: 'core.pay', version: 1, start: 'reserve', steps: { ...STEPS, apologise: { ...STEPS['apologise']!, next: 'notify' } as StepDef } });
    // v1b → v2: the same routes; notify after apologise lacks reserve's output on both, so it is how the definition behaves
    expect(compatibility(v1b, v2, atReserve).verdict).toBe('safe');
    // v1 → v2: notify reached after apologise is new, and reads reserve, which a failed reserve never produced
    expect(compatibility(v1, v2, atReserve).reasons.map((r) => r.code)).toEqual(['FLOW_COMPAT_OUTPUT_MISSING']);
  });

  it('a new read that only probes for an output ($exists) is not a reason', () => {
    const v2 = makeLogic({
      logicId: 'core.pay',
      version: 2,
      start: 'reserve',
      steps: { ...STEPS, notify: { ...STEPS['notify']!, next: 'audit' } as StepDef, audit: { kind: 'pass', input: '{ "scored": $exists(steps.fraud) }' } },
    });
    expect(compatibility(v1, v2, atReserve)).toEqual({ verdict: 'safe', reasons: [] });
  });

  it('a changed kind at the current step, and a changed compensation, are reasons', () => {
    const withComp = makeLogic({ logicId: 'core.pay', version: 1, start: 'reserve', steps: { ...STEPS, reserve: { ...STEPS['reserve']!, compensate: { kind: 'proxy', path: '/release' } } as StepDef } });
    const v2 = makeLogic({
      logicId: 'core.pay',
      version: 2,
      start: 'reserve',
      steps: { ...STEPS, reserve: { ...STEPS['reserve']!, compensate: { kind: 'proxy', path: '/release-v2' } } as StepDef, notify: { kind: 'pass' } },
    });
    const atNotify: InstanceShape = { state: 'waiting', currentStep: 'notify', running: 'step', generation: 1, outputs: ['reserve'], compensations: ['reserve'] };
    expect(compatibility(withComp, v2, atNotify).reasons.map((r) => [r.code, r.step])).toEqual([
      ['FLOW_COMPAT_STEP_KIND_CHANGED', 'notify'],
      ['FLOW_COMPAT_COMPENSATION_CHANGED', 'reserve'],
    ]);
  });
});

describe('output schemas', () => {
  const obj = (props: Record<string, unknown>, required: string[], extra: Record<string, unknown> = {}) => ({ type: 'object', properties: props, required, ...extra });
  it('accepts the same schema, an absent one, and a looser object; refuses a new requirement, a changed type, and an unknown past', () => {
    const id = { id: { type: 'string' } };
    expect(outputAccepts(obj(id, ['id']), undefined)).toBe(true);
    expect(outputAccepts(obj(id, ['id'], { $schema: 'x' }), obj(id, ['id']))).toBe(true);
    expect(outputAccepts(obj(id, ['id']), obj(id, []))).toBe(true);
    expect(outputAccepts(obj(id, []), obj(id, ['id']))).toBe(false);
    expect(outputAccepts(obj(id, ['id']), obj({ id: { type: 'number' } }, ['id']))).toBe(false);
    expect(outputAccepts(obj(id, ['id']), obj({ ...id, score: { type: 'number' } }, ['id']))).toBe(false);
    expect(outputAccepts(obj(id, ['id'], { additionalProperties: false }), obj({ ...id, score: { type: 'number' } }, ['id']))).toBe(true);
    expect(outputAccepts(undefined, obj(id, ['id']))).toBe(false);
  });
});

describe('what a continuing instance would run next (pure)', () => {
  const start = async (logic: LogicVersion) => (await begin(logic, createInstance(logic, { id: 'w1', env: 'e', input: {}, correlationId: null }))).instance;

  it('a step whose answer is unknown and whose schema refuses null stays where it is: nothing past it is made up', async () => {
    const logic = makeLogic({ logicId: 'core.next', start: 'reserve', steps: { reserve: { kind: 'proxy', path: '/r', output: { type: 'object', required: ['id'] }, next: 'done' }, done: { kind: 'pass' } } });
    // the service answered 202: parked, waiting for its callback
    const parked = (await onOutcome(logic, await start(logic), { status: 'parked' })).instance;
    expect(parked.state).toBe('waiting');
    const next = await previewContinue(logic, parked);
    expect(next).toMatchObject({ steps: [], stopsAt: { state: 'waiting', step: 'reserve' }, assumes: null });
  });

  it('a parked decision is answered with its first option; one whose payload schema needs fields is not answered', async () => {
    const steps = (schema?: Record<string, unknown>): Record<string, StepDef> => ({
      ask: { kind: 'decision', options: ['yes', 'no'], next: 'route', ...(schema === undefined ? {} : { schema }) },
      route: { kind: 'choice', branches: [{ when: 'decision.option = "yes"', next: 'pay' }], otherwise: 'stop' },
      pay: { kind: 'proxy', path: '/pay' },
      stop: { kind: 'pass' },
    });
    const open = makeLogic({ logicId: 'core.ask', start: 'ask', steps: steps() });
    const yes = await previewContinue(open, await start(open));
    expect(yes.assumes).toBe('decision ask = yes');
    expect(yes.steps.map((s) => [s.step, s.idempotencyKey])).toEqual([
      ['route', null],
      ['pay', 'w1:pay:0'],
    ]);
    const strict = makeLogic({ logicId: 'core.ask', start: 'ask', steps: steps({ type: 'object', required: ['note'], properties: { note: { type: 'string' } } }) });
    expect(await previewContinue(strict, await start(strict))).toMatchObject({ steps: [], stopsAt: { state: 'waiting', step: 'ask' }, assumes: null });
  });
});
