import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeEachDriver } from '../support/db.ts';
import { settle } from '../support/engine.ts';
import { CLIENT_SECRET, everyRow, Rig } from './rig.ts';

describeEachDriver('OAuth client credentials against a real authorization server', (getDb) => {
  let rig: Rig;
  const secretClient = () => rig.oauthEnv(rig.service, { FLOW_HANDLER_LEDGER_OAUTH_CLIENT_ID: 'secret-client', FLOW_HANDLER_LEDGER_OAUTH_CLIENT_SECRET: CLIENT_SECRET });
  beforeAll(async () => {
    rig = await new Rig().start();
  }, 60_000);
  afterAll(async () => {
    await rig.close();
  });

  it('a client secret: the service verifies the JWT the engine fetched for it', async () => {
    const engine = rig.engine(getDb(), secretClient());
    const record = await rig.run(engine, 'acme');
    expect(record.error).toBeNull();
    expect(record.state).toBe('completed');
    const call = rig.service.calls.at(-1)!;
    expect({ status: call.status, client: call.claims?.client_id, env: call.env }).toEqual({ status: 200, client: 'secret-client', env: 'acme' });
  });

  it('private_key_jwt (RFC 7523): the client proves itself with a key read from a PEM file', async () => {
    const engine = rig.engine(getDb(), rig.oauthEnv(rig.service, { FLOW_HANDLER_LEDGER_OAUTH_CLIENT_ID: 'jwt-client', FLOW_HANDLER_LEDGER_OAUTH_PRIVATE_KEY_FILE: rig.jwtKeyFile }));
    const record = await rig.run(engine, 'acme');
    expect(record.state).toBe('completed');
    expect(rig.service.calls.at(-1)!.claims?.client_id).toBe('jwt-client');
  });

  it('concurrent calls share one token request (single flight), and the cached token serves the calls after', async () => {
    const engine = rig.engine(getDb(), secretClient());
    const before = rig.auth.tokenRequests.length;
    const profile = engine.identities;
    const handlers = (await import('../../engine/executors/handlers.ts')).loadHandlerProfiles(secretClient());
    const source = profile.for('ledger', handlers.get('LEDGER')!, 'acme');
    const creds = await Promise.all(Array.from({ length: 8 }, () => source.credential()));
    expect(new Set(creds.map((c) => c.token)).size).toBe(1);
    expect(rig.auth.tokenRequests.length - before).toBe(1);
    await rig.run(engine, 'acme');
    await rig.run(engine, 'acme');
    expect(rig.auth.tokenRequests.length - before).toBe(1);
  });

  it('a token is fetched again shortly before it expires, on the engine clock', async () => {
    const engine = rig.engine(getDb(), secretClient());
    const before = rig.auth.tokenRequests.length;
    await rig.run(engine, 'acme');
    const first = rig.service.calls.at(-1)!.claims!.jti;
    rig.clock += 100_000; // the tokens live 120 s: still well inside
    await rig.run(engine, 'acme');
    expect(rig.service.calls.at(-1)!.claims!.jti).toBe(first);
    expect(rig.auth.tokenRequests.length - before).toBe(1);
    rig.clock += 10_000; // 110 s: inside the refresh margin (a tenth of its life)
    await rig.run(engine, 'acme');
    expect(rig.service.calls.at(-1)!.claims!.jti).not.toBe(first);
    expect(rig.auth.tokenRequests.length - before).toBe(2);
  });

  it('a 401 from the service drops the token: one new token, the same request sent again with the same idempotency key', async () => {
    const engine = rig.engine(getDb(), secretClient());
    await rig.run(engine, 'acme');
    const before = rig.auth.tokenRequests.length;
    rig.service.revokeSeen();
    const seen = rig.service.calls.length;
    const record = await rig.run(engine, 'acme');
    expect(record.state).toBe('completed');
    const calls = rig.service.calls.slice(seen);
    expect(calls.map((c) => c.status)).toEqual([401, 200]);
    expect(calls[0]!.idempotencyKey).toBe(calls[1]!.idempotencyKey);
    expect(calls[0]!.claims!.jti).not.toBe(calls[1]!.claims!.jti);
    expect(rig.auth.tokenRequests.length - before).toBe(1);
    expect(record.steps.filter((s) => s.step === 'charge').map((s) => s.attempt)).toEqual([1]);
  });

  it('a 401 to the new token too fails the step FLOW_M2M_TOKEN_REFUSED for good, after one resend', async () => {
    const engine = rig.engine(getDb(), secretClient());
    const seen = rig.service.calls.length;
    rig.service.refuseAll = true;
    try {
      const record = await rig.run(engine, 'acme');
      expect(record.state).toBe('failed');
      expect(record.error?.code).toBe('FLOW_M2M_TOKEN_REFUSED');
      const calls = rig.service.calls.slice(seen);
      expect(calls.map((c) => c.status)).toEqual([401, 401]);
      expect(calls[0]!.idempotencyKey).toBe(calls[1]!.idempotencyKey);
    } finally {
      rig.service.refuseAll = false;
    }
  });

  it('a token endpoint that is down fails the attempt retryably; a refused client fails the step for good', async () => {
    const engine = rig.engine(getDb(), secretClient());
    rig.auth.down = true;
    try {
      const record = await rig.run(engine, 'down');
      expect(record.state).toBe('pending');
      expect(record.steps.map((a) => a.error?.code)).toContain('FLOW_M2M_TOKEN_UNAVAILABLE');
    } finally {
      rig.auth.down = false;
    }
    const wrong = rig.engine(getDb(), rig.oauthEnv(rig.service, { FLOW_HANDLER_LEDGER_OAUTH_CLIENT_ID: 'secret-client', FLOW_HANDLER_LEDGER_OAUTH_CLIENT_SECRET: 'not-the-secret' }));
    const refused = await rig.run(wrong, 'acme');
    expect(refused.state).toBe('failed');
    expect(refused.error?.code).toBe('FLOW_M2M_CLIENT_REFUSED');
    expect(refused.error?.message).toContain('invalid_client');
    await settle(engine);
  });

  it('no access token nor client secret is ever written to a row or a log line', async () => {
    const tokens = new Set(rig.service.calls.map((c) => c.token).filter((t) => t !== undefined));
    expect(tokens.size).toBeGreaterThan(3);
    const rows = await everyRow(getDb());
    const logs = rig.logLines.join('\n');
    expect(rows.length).toBeGreaterThan(1000);
    expect(logs).toContain('FLOW_M2M_TOKEN_UNAVAILABLE');
    for (const secret of [...tokens, CLIENT_SECRET]) {
      expect(rows.includes(secret!)).toBe(false);
      expect(logs.includes(secret!)).toBe(false);
    }
  });
});
