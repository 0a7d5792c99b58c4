import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type CryptoKey, exportJWK, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAuthenticator } from '../../engine/api/auth.ts';
import { loadConfig } from '../../engine/config.ts';

/**
 * With a JWKS, a token is taken only from the issuer and for the audience configured: both are
 * required at boot and checked on every token. A JWKS URL in production is https.
 */
describe('auth for production', () => {
  const ISSUER = 'https://idp.example/';
  const AUDIENCE = 'sentin8-flow';
  const BASE = {
    NODE_ENV: 'production',
    FLOW_TOKEN_SECRET: 'token-secret-0123456789',
    FLOW_OUTBOX_SECRET: 'outbox-secret-0123456789',
    FLOW_AUTH_JWKS_URL: 'https://idp.example/.well-known/jwks.json',
    FLOW_AUTH_ISSUER: ISSUER,
    FLOW_AUTH_AUDIENCE: AUDIENCE,
  };
  let privateKey: CryptoKey;
  let dir: string;
  let jwksFile: string;

  beforeAll(async () => {
    const pair = await generateKeyPair('ES256', { extractable: true });
    privateKey = pair.privateKey;
    dir = mkdtempSync(join(tmpdir(), 's8flow-jwks-'));
    jwksFile = join(dir, 'jwks.json');
    writeFileSync(jwksFile, JSON.stringify({ keys: [{ ...(await exportJWK(pair.publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' }] }));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const signed = (claims: { iss?: string; aud?: string }) => {
    const jwt = new SignJWT({ envs: ['payments'], scope: 'flow:read' }).setProtectedHeader({ alg: 'ES256', kid: 'k1' }).setSubject('svc@payments');
    if (claims.iss !== undefined) jwt.setIssuer(claims.iss);
    if (claims.aud !== undefined) jwt.setAudience(claims.aud);
    return jwt.setExpirationTime(Math.floor(Date.now() / 1000) + 600).sign(privateKey);
  };

  it.each(['FLOW_AUTH_ISSUER', 'FLOW_AUTH_AUDIENCE'])('boot with a JWKS but no %s stops with FLOW_CONFIG_INVALID naming it', (missing) => {
    for (const production of ['production', 'development']) {
      const env = { ...BASE, NODE_ENV: production, [missing]: undefined };
      expect(() => loadConfig(env)).toThrow(expect.objectContaining({ code: 'FLOW_CONFIG_INVALID', details: [missing] }));
    }
    expect(loadConfig(BASE).auth).toMatchObject({ issuer: ISSUER, audience: AUDIENCE });
  });

  it('a JWKS URL over plain http is refused in production; a file path stays allowed', () => {
    const http = { ...BASE, FLOW_AUTH_JWKS_URL: 'http://idp.example/.well-known/jwks.json' };
    expect(() => loadConfig(http)).toThrow(expect.objectContaining({ code: 'FLOW_CONFIG_INVALID', details: ['FLOW_AUTH_JWKS_URL'] }));
    expect(() => createAuthenticator({ jwks: http.FLOW_AUTH_JWKS_URL, issuer: ISSUER, audience: AUDIENCE, production: true })).toThrow(
      expect.objectContaining({ code: 'FLOW_CONFIG_INVALID' }),
    );
    expect(loadConfig({ ...BASE, FLOW_AUTH_JWKS_URL: '/etc/flow/jwks.json' }).auth.jwksUrl).toBe('/etc/flow/jwks.json');
  });

  it('an authenticator over a JWKS without issuer or audience does not start', () => {
    expect(() => createAuthenticator({ jwks: jwksFile, production: true })).toThrow(expect.objectContaining({ code: 'FLOW_CONFIG_INVALID' }));
    expect(() => createAuthenticator({ jwks: jwksFile, issuer: ISSUER, production: true })).toThrow(expect.objectContaining({ code: 'FLOW_CONFIG_INVALID' }));
  });

  it('every token is checked for its issuer and audience', async () => {
    const auth = createAuthenticator({ jwks: jwksFile, issuer: ISSUER, audience: AUDIENCE, production: true });
    const refusal = (jwt: string) => auth(`Bearer ${jwt}`).then(() => null, (err: { code: string; status: number }) => ({ code: err.code, status: err.status }));
    expect((await auth(`Bearer ${await signed({ iss: ISSUER, aud: AUDIENCE })}`)).subject).toBe('svc@payments');
    const invalid = { code: 'FLOW_TOKEN_INVALID', status: 401 };
    expect(await refusal(await signed({ iss: 'https://evil.example/', aud: AUDIENCE }))).toEqual(invalid);
    expect(await refusal(await signed({ iss: ISSUER, aud: 'another-service' }))).toEqual(invalid);
    expect(await refusal(await signed({ aud: AUDIENCE }))).toEqual(invalid);
    expect(await refusal(await signed({ iss: ISSUER }))).toEqual(invalid);
  });
});
