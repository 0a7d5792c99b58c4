import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../engine/config.ts';

const dir = mkdtempSync(join(tmpdir(), 's8flow-m2m-config-'));
const file = join(dir, 'some.pem');
writeFileSync(file, 'not read at boot');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const PROD = { NODE_ENV: 'production', FLOW_TOKEN_SECRET: 'x'.repeat(32), FLOW_OUTBOX_SECRET: 'y'.repeat(32), FLOW_AUTH_JWKS_URL: 'https://idp/jwks', FLOW_AUTH_ISSUER: 'https://idp', FLOW_AUTH_AUDIENCE: 'flow' };
const LEDGER = { FLOW_HANDLER_LEDGER_URL: 'https://ledger.internal' };
const OAUTH = { ...LEDGER, FLOW_HANDLER_LEDGER_OAUTH_TOKEN_ENDPOINT: 'https://idp/token', FLOW_HANDLER_LEDGER_OAUTH_CLIENT_ID: 'engine', FLOW_HANDLER_LEDGER_OAUTH_CLIENT_SECRET: 's' };

/** The variable a FLOW_CONFIG_INVALID names, or 'ok'. */
function refused(vars: Record<string, string>): string {
  try {
    loadConfig(vars);
    return 'ok';
  } catch (err) {
    const e = err as { code?: string; details?: string[] };
    return e.code === 'FLOW_CONFIG_INVALID' ? e.details![0]! : String(err);
  }
}

describe('handler identity configuration', () => {
  it('reads each identity variable, and an env’s own on top of the profile’s', () => {
    const config = loadConfig({ ...OAUTH, FLOW_HANDLER_LEDGER_OAUTH_CLIENT_ID__TEAM_A: 'engine-a', FLOW_HANDLER_LEDGER_OAUTH_INITIAL_ACCESS_TOKEN: 'iat' });
    const ledger = config.handlers.get('LEDGER')!;
    expect(ledger.identity).toEqual({ tokenEndpoint: 'https://idp/token', clientId: 'engine', clientSecret: 's', initialAccessToken: 'iat' });
    expect(ledger.envIdentity?.get('TEAM_A')).toEqual({ clientId: 'engine-a' });
    // OAUTH_INITIAL_ACCESS_TOKEN is no static _TOKEN, and no variable makes a second profile
    expect(ledger.token).toBeUndefined();
    expect([...config.handlers.keys()]).toEqual(['LEDGER']);
  });

  it('in production a handler needs OAuth, a client certificate or AUTH=static', () => {
    expect(refused({ ...PROD, ...LEDGER, FLOW_HANDLER_LEDGER_TOKEN: 't' })).toBe('FLOW_HANDLER_LEDGER_AUTH');
    expect(refused({ ...PROD, ...LEDGER, FLOW_HANDLER_LEDGER_TOKEN: 't', FLOW_HANDLER_LEDGER_AUTH: 'static' })).toBe('ok');
    expect(refused({ ...PROD, ...OAUTH })).toBe('ok');
    expect(refused({ ...PROD, ...LEDGER, FLOW_HANDLER_LEDGER_TLS_CERT_FILE: file, FLOW_HANDLER_LEDGER_TLS_KEY_FILE: file })).toBe('ok');
    // one env may keep the static token, saying so, while the profile uses OAuth
    expect(refused({ ...PROD, ...OAUTH, FLOW_HANDLER_LEDGER_AUTH__TEAM_A: 'static', FLOW_HANDLER_LEDGER_TOKEN__TEAM_A: 't' })).toBe('ok');
    expect(refused({ ...LEDGER, FLOW_HANDLER_LEDGER_TOKEN: 't' })).toBe('ok');
  });

  it('an incomplete identity stops boot naming the variable to set', () => {
    expect(refused({ ...LEDGER, FLOW_HANDLER_LEDGER_AUTH: 'oauth' })).toBe('FLOW_HANDLER_LEDGER_AUTH');
    expect(refused({ ...LEDGER, FLOW_HANDLER_LEDGER_OAUTH_CLIENT_ID: 'x' })).toBe('FLOW_HANDLER_LEDGER_OAUTH_TOKEN_ENDPOINT');
    expect(refused({ ...OAUTH, FLOW_HANDLER_LEDGER_OAUTH_CLIENT_ID: '' })).toBe('FLOW_HANDLER_LEDGER_OAUTH_CLIENT_ID');
    expect(refused({ ...OAUTH, FLOW_HANDLER_LEDGER_OAUTH_TOKEN_ENDPOINT: 'http://idp/token' })).toBe('FLOW_HANDLER_LEDGER_OAUTH_TOKEN_ENDPOINT');
    expect(refused({ ...OAUTH, FLOW_HANDLER_LEDGER_OAUTH_PRIVATE_KEY_FILE: file })).toBe('FLOW_HANDLER_LEDGER_OAUTH_PRIVATE_KEY_FILE');
    expect(refused({ ...OAUTH, FLOW_HANDLER_LEDGER_OAUTH_CLIENT_SECRET: '' })).toBe('FLOW_HANDLER_LEDGER_OAUTH_CLIENT_SECRET');
    expect(refused({ ...LEDGER, FLOW_HANDLER_LEDGER_TLS_CERT_FILE: file })).toBe('FLOW_HANDLER_LEDGER_TLS_KEY_FILE');
    expect(refused({ ...LEDGER, FLOW_HANDLER_LEDGER_URL: 'http://ledger', FLOW_HANDLER_LEDGER_TLS_CERT_FILE: file, FLOW_HANDLER_LEDGER_TLS_KEY_FILE: file })).toBe('FLOW_HANDLER_LEDGER_TLS_CERT_FILE');
    expect(refused({ ...LEDGER, FLOW_HANDLER_LEDGER_TLS_CERT_FILE: join(dir, 'missing.pem'), FLOW_HANDLER_LEDGER_TLS_KEY_FILE: file })).toBe('FLOW_HANDLER_LEDGER_TLS_CERT_FILE');
    const registering = { ...LEDGER, FLOW_HANDLER_LEDGER_OAUTH_ISSUER: 'https://idp', FLOW_HANDLER_LEDGER_OAUTH_REGISTER: 'tls_client_auth' };
    expect(refused(registering)).toBe('FLOW_HANDLER_LEDGER_TLS_CERT_FILE');
    const withCert = { ...registering, FLOW_HANDLER_LEDGER_TLS_CERT_FILE: file, FLOW_HANDLER_LEDGER_TLS_KEY_FILE: file };
    expect(refused(withCert)).toBe('FLOW_SECRETS_KEY');
    expect(refused({ ...withCert, FLOW_SECRETS_KEY: Buffer.alloc(32).toString('base64') })).toBe('ok');
    expect(refused({ ...withCert, FLOW_HANDLER_LEDGER_OAUTH_REGISTER: 'client_secret_basic' })).toBe('FLOW_HANDLER_LEDGER_OAUTH_REGISTER');
  });

  it('FLOW_SECRETS_KEY must be 32 bytes in base64', () => {
    expect(refused({ FLOW_SECRETS_KEY: Buffer.alloc(16).toString('base64') })).toBe('FLOW_SECRETS_KEY');
    expect(refused({ FLOW_SECRETS_KEY: 'not base64 at all!' })).toBe('FLOW_SECRETS_KEY');
    expect(loadConfig({ FLOW_SECRETS_KEY: Buffer.alloc(32, 1).toString('base64') }).secretsKey).toEqual(Buffer.alloc(32, 1));
  });
});
