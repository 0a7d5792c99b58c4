import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { engineOptionsFrom, loadConfig } from '../../engine/config.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import type { Db } from '../../engine/store/db.ts';
import { openTestDb, closeTestDb } from '../support/db.ts';

const BIN = new URL('../../bin/s8flow.mjs', import.meta.url).pathname;
const SECRETS = {
  FLOW_TOKEN_SECRET: 'token-secret-0123456789',
  FLOW_OUTBOX_SECRET: 'outbox-secret-0123456789',
  FLOW_AUTH_JWKS_URL: 'https://idp.example/.well-known/jwks.json',
  FLOW_AUTH_ISSUER: 'https://idp.example/',
  FLOW_AUTH_AUDIENCE: 'sentin8-flow',
};

describe('the configuration, parsed once from the environment', () => {
  it('gives every setting its default, and reads lists, the listener and handler profiles with per-env tokens', () => {
    expect(loadConfig({})).toMatchObject({
      databaseUrl: undefined,
      schema: 'flow',
      env: 'default',
      production: false,
      httpAllowlist: [],
      callbackAllowlist: [],
      listen: { host: '127.0.0.1', port: 8080 },
      auth: { secret: undefined, jwksUrl: undefined, issuer: undefined, audience: undefined },
      metricsOpen: false,
      maxInputBytes: 1024 * 1024,
      maxRetryAfterMs: 3_600_000,
    });
    expect(loadConfig({ FLOW_MAX_INPUT_BYTES: '65536', FLOW_RETRY_AFTER_MAX_MS: '60000' })).toMatchObject({ maxInputBytes: 65536, maxRetryAfterMs: 60000 });
    const config = loadConfig({
      DATABASE_URL: 'postgres://u@h/db',
      FLOW_ENV: 'prod-eu',
      FLOW_HTTP_ALLOWLIST: 'api.example, pay.example:8443',
      FLOW_EVENT_SINK_URL: '',
      FLOW_PORT: '9090',
      FLOW_HANDLER_PAYMENTS_URL: 'http://payments.internal',
      FLOW_HANDLER_PAYMENTS_TOKEN: 'static',
      FLOW_HANDLER_PAYMENTS_TOKEN__TENANT_A: 'for-a',
    });
    expect(config).toMatchObject({ databaseUrl: 'postgres://u@h/db', env: 'prod-eu', httpAllowlist: ['api.example', 'pay.example:8443'] });
    expect(config.eventSinkUrl).toBeUndefined();
    expect(config.listen.port).toBe(9090);
    expect(config.handlers.get('PAYMENTS')).toEqual({ url: 'http://payments.internal', token: 'static', envTokens: new Map([['TENANT_A', 'for-a']]) });
  });

  it.each([
    ['FLOW_PORT', 'eighty'],
    ['FLOW_PORT', '70000'],
    ['DATABASE_URL', 'mysql://x'],
    ['FLOW_SCHEMA', 'Bad-Name'],
    ['FLOW_EVENT_SINK_URL', 'not a url'],
    ['FLOW_TOKEN_SECRET', 'short'],
    ['FLOW_AUTH_SECRET', 'too-short-for-hs256'],
    ['FLOW_HANDLER_LEDGER_URL', 'ftp://ledger'],
    ['FLOW_MAX_INPUT_BYTES', 'lots'],
    ['FLOW_MAX_INPUT_BYTES', '10'],
    ['FLOW_RETRY_AFTER_MAX_MS', '-1'],
    ['FLOW_RETRY_AFTER_MAX_MS', '1e20'],
  ])('stops on a bad %s with FLOW_CONFIG_INVALID naming it', (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(expect.objectContaining({ code: 'FLOW_CONFIG_INVALID', message: expect.stringMatching(new RegExp(`^${name}: `)) }));
  });

  it('in production refuses to start without signing secrets or a JWKS for API tokens', () => {
    const prod = { NODE_ENV: 'production', ...SECRETS };
    expect(loadConfig(prod).production).toBe(true);
    for (const [missing, code] of [
      ['FLOW_TOKEN_SECRET', 'FLOW_SECRET_MISSING'],
      ['FLOW_OUTBOX_SECRET', 'FLOW_SECRET_MISSING'],
      ['FLOW_AUTH_JWKS_URL', 'FLOW_AUTH_JWKS_MISSING'],
    ] as const) {
      expect(() => loadConfig({ ...prod, [missing]: undefined })).toThrow(expect.objectContaining({ code, message: expect.stringContaining(missing) }));
    }
  });

  it('s8flow start stops before touching the database and names the bad variable', async () => {
    const failed = await promisify(execFile)(process.execPath, [BIN, 'start'], {
      env: { ...process.env, DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none', FLOW_PORT: 'eighty' },
    }).catch((err: { code: number; stderr: string }) => err);
    expect(failed).toMatchObject({ code: 1, stderr: expect.stringMatching(/^s8flow start: FLOW_PORT: .*\[FLOW_CONFIG_INVALID\]/) });
  });
});

describe('the Engine takes its settings as options, never from process.env', () => {
  let db: Db;
  beforeAll(async () => {
    db = await openTestDb('pglite');
  });
  afterAll(() => closeTestDb(db));

  it('ignores NODE_ENV and secrets in process.env; engineOptionsFrom carries the config in', () => {
    const saved = { ...process.env };
    try {
      process.env['NODE_ENV'] = 'production';
      delete process.env['FLOW_TOKEN_SECRET'];
      expect(() => new Engine({ db })).not.toThrow();
      expect(() => new Engine(engineOptionsFrom(loadConfig({ NODE_ENV: 'production', ...SECRETS }), db))).not.toThrow();
      const prodWithoutSecrets = { ...loadConfig({}), production: true };
      expect(() => new Engine(engineOptionsFrom(prodWithoutSecrets, db))).toThrow(expect.objectContaining({ code: 'FLOW_SECRET_MISSING' }));
    } finally {
      process.env = saved;
    }
  });

  it('reads when an instance counts as stuck, and the engine lists by it', () => {
    const config = loadConfig({ FLOW_STUCK_PENDING_MS: '5000', FLOW_STUCK_PARKED_MS: '3600000' });
    expect(new Engine(engineOptionsFrom(config, db)).ops.stuck).toEqual({ pendingForMs: 5000, parkedForMs: 3_600_000 });
    expect(new Engine(engineOptionsFrom(loadConfig({}), db)).ops.stuck).toEqual({ pendingForMs: 60_000, parkedForMs: 86_400_000 });
    expect(() => loadConfig({ FLOW_STUCK_PARKED_MS: 'a day' })).toThrow(expect.objectContaining({ code: 'FLOW_CONFIG_INVALID', message: expect.stringContaining('FLOW_STUCK_PARKED_MS') }));
  });

  it('reads retention per env over the default, and the archive directory; a bad figure names its variable', () => {
    expect(loadConfig({}).retention).toEqual({ days: null, envDays: {}, intervalMs: 3_600_000, archiveDir: null });
    expect(loadConfig({ FLOW_RETENTION_DAYS: '90', FLOW_RETENTION_DAYS__prod: '400', FLOW_ARCHIVE_DIR: '/var/archive' }).retention).toEqual({
      days: 90,
      envDays: { prod: 400 },
      intervalMs: 3_600_000,
      archiveDir: '/var/archive',
    });
    expect(() => loadConfig({ FLOW_RETENTION_DAYS__prod: 'a year' })).toThrow(
      expect.objectContaining({ code: 'FLOW_CONFIG_INVALID', message: expect.stringMatching(/^FLOW_RETENTION_DAYS__prod: /) }),
    );
    expect(() => loadConfig({ FLOW_RETENTION_DAYS: '0' })).toThrow(expect.objectContaining({ code: 'FLOW_CONFIG_INVALID', message: expect.stringMatching(/^FLOW_RETENTION_DAYS: /) }));
  });
});
