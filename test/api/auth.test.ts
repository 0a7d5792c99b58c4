import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type CryptoKey, exportJWK, generateKeyPair, type JWK, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type Authenticate, createAuthenticator } from '../../engine/api/auth.ts';
import { AUTH_SECRET, token } from './support.ts';

/** Bearer tokens as production verifies them (a JWKS, from a file or a URL) and as development does (HS256). */
describe('API authentication', () => {
  let privateKey: CryptoKey;
  let jwks: { keys: JWK[] };
  let dir: string;
  let server: Server;
  let jwksUrl: string;

  beforeAll(async () => {
    const pair = await generateKeyPair('ES256', { extractable: true });
    privateKey = pair.privateKey;
    jwks = { keys: [{ ...(await exportJWK(pair.publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' }] };
    dir = mkdtempSync(join(tmpdir(), 's8flow-jwks-'));
    writeFileSync(join(dir, 'jwks.json'), JSON.stringify(jwks));
    server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(jwks));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    jwksUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/.well-known/jwks.json`;
  });
  afterAll(async () => {
    rmSync(dir, { recursive: true, force: true });
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  const idp = { issuer: 'https://idp.example/', audience: 'sentin8-flow' };
  const signed = (claims: Record<string, unknown>, exp: number | null = 600) => {
    const jwt = new SignJWT(claims).setProtectedHeader({ alg: 'ES256', kid: 'k1' }).setSubject('svc@payments').setIssuer(idp.issuer).setAudience(idp.audience);
    if (exp !== null) jwt.setExpirationTime(Math.floor(Date.now() / 1000) + exp);
    return jwt.sign(privateKey);
  };
  const refusal = (auth: Authenticate, header: string | undefined) => auth(header).then(() => null, (err: { code: string; status: number }) => ({ code: err.code, status: err.status }));

  for (const source of ['file', 'url'] as const) {
    // a JWKS URL over plain http is refused in production: the loopback one here is served to development
    it(`verifies against a JWKS ${source === 'file' ? 'file (production)' : 'URL (development)'}`, async () => {
      const auth = createAuthenticator({ jwks: source === 'file' ? join(dir, 'jwks.json') : jwksUrl, ...idp, production: source === 'file' });
      const ok = await auth(`Bearer ${await signed({ envs: ['payments'], scope: 'flow:start flow:read:payments.*' })}`);
      expect(ok).toEqual({ subject: 'svc@payments', envs: ['payments'], scopes: ['flow:start', 'flow:read:payments.*'], expiresAt: expect.any(Number) });
      // production requires exp
      if (source === 'file') expect(await refusal(auth, `Bearer ${await signed({ envs: ['payments'], scope: 'flow:start' }, null)}`)).toEqual({ code: 'FLOW_TOKEN_INVALID', status: 401 });
      expect(await refusal(auth, `Bearer ${await signed({ envs: ['payments'], scope: 'flow:start' }, -60)}`)).toEqual({ code: 'FLOW_TOKEN_EXPIRED', status: 401 });
      // an HS256 token, even one signed with the development secret, is never accepted against a JWKS
      expect(await refusal(auth, `Bearer ${await token({ envs: ['payments'] })}`)).toEqual({ code: 'FLOW_TOKEN_INVALID', status: 401 });
      expect(await refusal(auth, undefined)).toEqual({ code: 'FLOW_UNAUTHENTICATED', status: 401 });
    });
  }

  it('refuses tokens whose claims do not have the shape of DESIGN §10', async () => {
    const auth = createAuthenticator({ jwks: join(dir, 'jwks.json'), ...idp, production: true });
    for (const claims of [{ scope: 'flow:read' }, { envs: 'payments', scope: 'flow:read' }, { envs: ['payments'] }, { envs: [], scope: 'flow:read' }]) {
      expect(await refusal(auth, `Bearer ${await signed(claims)}`), JSON.stringify(claims)).toEqual({ code: 'FLOW_TOKEN_INVALID', status: 401 });
    }
    expect(await refusal(auth, 'Basic dXNlcjpwYXNz')).toEqual({ code: 'FLOW_UNAUTHENTICATED', status: 401 });
    expect(await refusal(auth, 'Bearer not.a.jwt')).toEqual({ code: 'FLOW_TOKEN_INVALID', status: 401 });
  });

  it('development verifies HS256 with the secret; production without a JWKS, or development without either, does not start', async () => {
    const dev = createAuthenticator({ secret: AUTH_SECRET, production: false });
    expect(await dev(`Bearer ${await token({ sub: 'bob', envs: ['*'], scope: 'flow:admin' })}`)).toEqual({ subject: 'bob', envs: ['*'], scopes: ['flow:admin'], expiresAt: expect.any(Number) });
    expect(await refusal(dev, `Bearer ${await token({ secret: 'a-different-secret-a-different-secret!!' })}`)).toEqual({ code: 'FLOW_TOKEN_INVALID', status: 401 });
    expect(() => createAuthenticator({ secret: AUTH_SECRET, production: true })).toThrow(expect.objectContaining({ code: 'FLOW_AUTH_UNCONFIGURED' }));
    expect(() => createAuthenticator({ production: false })).toThrow(expect.objectContaining({ code: 'FLOW_AUTH_UNCONFIGURED' }));
  });

  it('a token taken on trust after its first check still expires at its exp; a forged one is never trusted', async () => {
    const auth = createAuthenticator({ jwks: join(dir, 'jwks.json'), ...idp, production: true });
    const jwt = await signed({ envs: ['payments'], scope: 'flow:read' }, 30);
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      expect((await auth(`Bearer ${jwt}`)).subject).toBe('svc@payments');
      expect((await auth(`Bearer ${jwt}`)).subject).toBe('svc@payments');
      vi.setSystemTime(Date.now() + 31_000);
      expect(await refusal(auth, `Bearer ${jwt}`)).toEqual({ code: 'FLOW_TOKEN_EXPIRED', status: 401 });
    } finally {
      vi.useRealTimers();
    }
    // a token whose signature does not hold is refused however often it comes
    const forged = `${jwt.slice(0, -4)}${jwt.endsWith('AAAA') ? 'BBBB' : 'AAAA'}`;
    expect(await refusal(auth, `Bearer ${forged}`)).toEqual({ code: 'FLOW_TOKEN_INVALID', status: 401 });
    expect(await refusal(auth, `Bearer ${forged}`)).toEqual({ code: 'FLOW_TOKEN_INVALID', status: 401 });
  });
});
