import { describe, expect, it } from 'vitest';
import type { StepDef } from '../../contracts/index.ts';
import { handlerUsage, type LiveGroup, type VersionInUse } from '../../engine/core/handler-usage.ts';
import { makeLogic } from '../contracts/helpers.ts';

/** reserve (undone by /release) → charge → ship; no live instance starts anything new: the version is retired. */
const STEPS: Record<string, StepDef> = {
  reserve: { kind: 'proxy', path: '/reserve', compensate: { kind: 'proxy', path: '/release' }, next: 'charge' },
  charge: { kind: 'proxy', path: '/charge', next: 'ship' },
  ship: { kind: 'decision', options: ['ok'] },
};
const doc = makeLogic({ logicId: 'core.pay', version: 1, domain: 'pay', start: 'reserve', steps: STEPS });
const group = (g: Partial<LiveGroup>): LiveGroup => ({ state: 'waiting', currentStep: 'ship', compensations: [], rewindTo: null, count: 1, ...g });
const version = (groups: LiveGroup[], live?: Record<string, number>, readable = true): VersionInUse => {
  const byState: Record<string, number> = {};
  for (const g of groups) byState[g.state] = (byState[g.state] ?? 0) + g.count;
  return { doc, active: false, live: live ?? byState, groups, readable };
};
const path = (v: VersionInUse, p: string) => handlerUsage([v]).items[0]!.paths.find((x) => x.path === p)!;

describe('handler usage core: how a group of live instances reaches a path', () => {
  it('an unwinding instance calls only the compensations it registered, not the steps ahead of where it failed', () => {
    const v = version([group({ state: 'compensating', currentStep: 'charge', compensations: ['reserve'], count: 4 })]);
    expect(path(v, '/release').versions[0]!.groups).toEqual([{ state: 'compensating', currentStep: 'charge', count: 4, reach: 'compensation', via: 'reserve (compensate)' }]);
    expect(path(v, '/release').mayTurnOff).toBe(false);
    expect(path(v, '/charge')).toMatchObject({ mayTurnOff: true });
    expect(path(v, '/charge').versions[0]!.groups[0]!.reach).toBe('passed');
  });

  it('an instance unwinding for a repair goes forward again from the step the repair rewinds to', () => {
    const v = version([group({ state: 'compensating', currentStep: 'ship', compensations: ['reserve'], rewindTo: 'charge' })]);
    expect(path(v, '/charge').versions[0]!.groups[0]).toMatchObject({ reach: 'ahead', via: 'charge' });
    expect(path(v, '/reserve').mayTurnOff).toBe(true);
  });

  it('a step ahead that registers a compensation holds the compensation path back too', () => {
    const v = version([group({ state: 'pending', currentStep: 'reserve' })]);
    expect(path(v, '/reserve').versions[0]!.groups[0]).toMatchObject({ reach: 'at', via: 'reserve' });
    expect(path(v, '/release').versions[0]!.groups[0]).toMatchObject({ reach: 'compensation', via: 'reserve (compensate)' });
  });

  it('instances the store did not group (past its limit) count as still calling every path', () => {
    const v = version([group({ count: 2 })], { waiting: 2, pending: 5 });
    const reserve = path(v, '/reserve');
    expect(reserve.versions[0]!.groups).toEqual([
      { state: null, currentStep: null, count: 5, reach: 'ungrouped', via: null },
      { state: 'waiting', currentStep: 'ship', count: 2, reach: 'passed', via: null },
    ]);
    expect(reserve.mayTurnOff).toBe(false);
    expect(reserve.reason).toMatch(/^no: 5 live instances of core\.pay@1 may still call it: 5 not looked at/);
  });

  it('a version the reader may not see is counted in the verdict without naming its steps', () => {
    const v = version([group({ state: 'pending', currentStep: 'charge', count: 3 })], undefined, false);
    const charge = path(v, '/charge');
    expect(charge.versions).toEqual([]);
    expect(charge.mayTurnOff).toBe(false);
    expect(charge.reason).toBe('no: 3 live instances of a version you may not read may still call it: 1 more group');
    expect(charge.reason).not.toContain('charge`');
  });

  it('the handler is needed while any of its paths is, and says which', () => {
    const v = version([group({ state: 'pending', currentStep: 'charge' })]);
    const h = handlerUsage([v]).items[0]!;
    expect(h.handler).toBe('pay');
    expect(h.mayTurnOff).toBe(false);
    expect(h.reason).toBe('no: 1 of its 3 paths is still needed: /charge');
    const done = handlerUsage([version([])]).items[0]!;
    expect(done).toMatchObject({ mayTurnOff: true, reason: 'yes: no version active or live instance needs any of its 3 paths' });
  });
});
