import { describe, expect, it } from 'vitest';
import { grantRefusals, type HandlerServes, legacyGrant, OPERATOR_GRANT, type PublisherGrant } from '../../contracts/grants.ts';
import { loadConfig } from '../../engine/config.ts';
import { loadHandlerProfiles, servesIn } from '../../engine/executors/handlers.ts';
import { makeLogic } from './helpers.ts';

/** The grant rule as a pure function: what it refuses, and what each refusal names as missing. */

const servesNothing = (handler: string): HandlerServes => ({ variable: `FLOW_HANDLER_${handler.toUpperCase().replace(/[-.]/g, '_')}_SERVES`, globs: undefined });
const narrowed: PublisherGrant = { subject: 'team-a-ci', scopes: ['flow:publish:team-a.*', 'flow:start:team-a.*'] };

const everything = makeLogic({
  logicId: 'team-a.all',
  domain: 'team-a',
  start: 'own',
  modules: { m: { sha256: 'a'.repeat(64), imports: { charge: { handler: 'payments', path: '/c' }, local: { path: '/l' } } } },
  steps: {
    own: { kind: 'proxy', path: '/x', next: 'run', compensate: { kind: 'proxy', handler: 'refunds', path: '/r' } },
    run: { kind: 'func', module: 'm', next: 'fan' },
    fan: { kind: 'children', logicId: 'team-a.child', items: '[]', itemInput: '{}', failurePolicy: 'fail_fast', next: 'other' },
    other: { kind: 'children', logicId: 'payments.capture', items: '[]', itemInput: '{}', failurePolicy: 'fail_fast' },
  },
  triggers: [{ event: 'team-a.asked', input: '{}' }],
});

describe('grantRefusals', () => {
  it('refuses every handler (default domain, compensation, module imports), foreign child and ungranted event of a narrowed publisher', () => {
    const refusals = grantRefusals(everything, narrowed, servesNothing);
    expect(refusals.map((r) => [r.code, r.step, r.part, r.target, r.missing])).toEqual([
      ['FLOW_GRANT_HANDLER', 'own', 'step', 'team-a', 'FLOW_HANDLER_TEAM_A_SERVES matching team-a.all'],
      ['FLOW_GRANT_HANDLER', 'own', 'compensate', 'refunds', 'FLOW_HANDLER_REFUNDS_SERVES matching team-a.all'],
      ['FLOW_GRANT_HANDLER', 'run', 'import:charge', 'payments', 'FLOW_HANDLER_PAYMENTS_SERVES matching team-a.all'],
      ['FLOW_GRANT_HANDLER', 'run', 'import:local', 'team-a', 'FLOW_HANDLER_TEAM_A_SERVES matching team-a.all'],
      ['FLOW_GRANT_CHILD', 'other', 'step', 'payments.capture', 'flow:start:payments.capture'],
      ['FLOW_GRANT_EVENT', undefined, undefined, 'team-a.asked', 'flow:events:team-a.asked'],
    ]);
  });

  it('lets a profile serve the definitions its globs match, and an events scope take its types', () => {
    const serves = (h: string): HandlerServes => ({ variable: h, globs: h === 'payments' ? ['billing.*'] : ['team-a.*'] });
    const refusals = grantRefusals(everything, { ...narrowed, scopes: [...narrowed.scopes!, 'flow:events:team-a.*'] }, serves);
    expect(refusals.map((r) => [r.code, r.target])).toEqual([
      ['FLOW_GRANT_HANDLER', 'payments'],
      ['FLOW_GRANT_CHILD', 'payments.capture'],
    ]);
  });

  it('refuses nothing to the operator or an un-narrowed admin, and a version without a recorded grant everything outside itself', () => {
    expect(grantRefusals(everything, OPERATOR_GRANT, servesNothing)).toEqual([]);
    expect(grantRefusals(everything, { subject: 'root', scopes: ['flow:admin'] }, servesNothing)).toEqual([]);
    // a narrowed admin is a narrowed publisher
    expect(grantRefusals(everything, { subject: 'x', scopes: ['flow:admin:team-a.*'] }, servesNothing).map((r) => r.code)).toContain('FLOW_GRANT_HANDLER');
    const legacy = grantRefusals(everything, legacyGrant('team-a.all'), servesNothing).map((r) => r.code);
    expect(legacy.filter((c) => c === 'FLOW_GRANT_CHILD')).toHaveLength(2);
    expect(legacy).toContain('FLOW_GRANT_EVENT');
  });
});

describe('a declared schedule', () => {
  const scheduled = makeLogic({ logicId: 'team-a.nightly', start: 's', steps: { s: { kind: 'pass' } }, schedules: [{ cron: '0 3 * * *' }] });
  it('needs the publisher to hold flow:start for the definition it starts', () => {
    const publishOnly: PublisherGrant = { subject: 'ci', scopes: ['flow:publish:team-a.*'] };
    expect(grantRefusals(scheduled, publishOnly, () => ({ variable: 'X', globs: [] })).map((r) => [r.code, r.target, r.missing])).toEqual([
      ['FLOW_GRANT_SCHEDULE', 'team-a.nightly', 'flow:start:team-a.nightly'],
    ]);
    expect(grantRefusals(scheduled, narrowed, () => ({ variable: 'X', globs: [] }))).toEqual([]);
  });
});

describe('FLOW_HANDLER_<NAME>_SERVES', () => {
  it('is read with its per-env override, comma- or space-separated', () => {
    const profiles = loadHandlerProfiles({
      FLOW_HANDLER_PAYMENTS_URL: 'http://pay',
      FLOW_HANDLER_PAYMENTS_SERVES: 'billing.*, payments.*',
      FLOW_HANDLER_PAYMENTS_SERVES__EU_PROD: 'payments.eu.* shared.audit',
    });
    expect(servesIn(profiles, 'staging')('payments')).toEqual({ variable: 'FLOW_HANDLER_PAYMENTS_SERVES', globs: ['billing.*', 'payments.*'] });
    expect(servesIn(profiles, 'eu-prod')('payments')).toEqual({ variable: 'FLOW_HANDLER_PAYMENTS_SERVES__EU_PROD', globs: ['payments.eu.*', 'shared.audit'] });
    expect(servesIn(profiles, 'eu-prod')('unknown').globs).toBeUndefined();
  });

  it('refuses at boot a glob that is not a logicId glob, naming the variable', () => {
    expect(() => loadConfig({ FLOW_HANDLER_PAY_URL: 'http://pay', FLOW_HANDLER_PAY_SERVES__PROD: 'ok.*, bad/glob' })).toThrow(
      expect.objectContaining({ code: 'FLOW_CONFIG_INVALID', message: expect.stringContaining('FLOW_HANDLER_PAY_SERVES__PROD') }),
    );
  });
});
