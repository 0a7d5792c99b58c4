import { describe, expect, it } from 'vitest';
import { engineOptionsFrom, loadConfig } from '../../engine/config.ts';
import type { Db } from '../../engine/store/db.ts';

describe('flow control settings, parsed once from the environment', () => {
  it('reads env weights, the throttle budget and circuit policies, global and per handler profile', () => {
    const config = loadConfig({
      FLOW_ENV_WEIGHTS: 'prod=3, staging = 1',
      FLOW_THROTTLE_BUDGET_MS: '60000',
      FLOW_CIRCUIT_FAILURES: '5',
      FLOW_HANDLER_LEDGER_CIRCUIT_FAILURES: '2',
      FLOW_HANDLER_LEDGER_CIRCUIT_OPEN_MS: '5000',
    });
    expect(config.envWeights).toEqual({ prod: 3, staging: 1 });
    expect(config.throttleBudgetMs).toBe(60_000);
    expect(config.circuits.policy).toEqual({ failures: 5, openMs: 30_000 });
    expect(config.circuits.handlers?.get('LEDGER')).toEqual({ failures: 2, openMs: 5000 });
    const opts = engineOptionsFrom(config, {} as Db);
    expect(opts.worker?.envWeights).toEqual({ prod: 3, staging: 1 });
    expect(opts.throttleBudgetMs).toBe(60_000);
    // the defaults: every env weighs 1, circuits never open, 15 minutes of holds
    expect(loadConfig({})).toMatchObject({ envWeights: {}, throttleBudgetMs: 900_000, circuits: { policy: { failures: 0, openMs: 30_000 } } });
  });

  it.each([
    ['FLOW_ENV_WEIGHTS', 'prod'],
    ['FLOW_ENV_WEIGHTS', 'prod=0'],
    ['FLOW_ENV_WEIGHTS', 'prod=101'],
    ['FLOW_ENV_WEIGHTS', 'prod=1.5'],
    ['FLOW_ENV_WEIGHTS', 'prod=2,prod=3'],
    ['FLOW_ENV_WEIGHTS', 'a\u0001b=2'],
    ['FLOW_THROTTLE_BUDGET_MS', '-1'],
    ['FLOW_CIRCUIT_FAILURES', 'many'],
    ['FLOW_HANDLER_LEDGER_CIRCUIT_OPEN_MS', '0'],
    ['FLOW_HANDLER_LEDGER_CIRCUIT_FAILURES', '2.5'],
  ])('refuses %s=%j with FLOW_CONFIG_INVALID naming it', (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(expect.objectContaining({ code: 'FLOW_CONFIG_INVALID', message: expect.stringContaining(name) }));
  });
});
