import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeEachDriver } from '../support/db.ts';
import { settle } from '../support/engine.ts';
import { Rig } from './rig.ts';

describeEachDriver('mutual TLS and certificate-bound tokens (RFC 8705)', (getDb) => {
  let rig: Rig;
  beforeAll(async () => {
    rig = await new Rig().start();
  }, 60_000);
  afterAll(async () => {
    await rig.close();
  });

  it('the token is requested over the client certificate and bound to it; the service checks cnf.x5t#S256 against its TLS peer', async () => {
    const engine = rig.engine(
      getDb(),
      rig.oauthEnv(rig.mtlsService, {
        FLOW_HANDLER_LEDGER_OAUTH_CLIENT_ID: 'mtls-a',
        FLOW_HANDLER_LEDGER_TLS_CERT_FILE: rig.certA.certFile,
        FLOW_HANDLER_LEDGER_TLS_KEY_FILE: rig.certA.keyFile,
      }),
    );
    const before = rig.auth.tokenRequests.length;
    const record = await rig.run(engine, 'acme');
    expect(record.error).toBeNull();
    expect(record.state).toBe('completed');
    const call = rig.mtlsService.calls.at(-1)!;
    expect({ status: call.status, cn: call.certCn, bound: call.bound, client: call.claims?.client_id }).toEqual({ status: 200, cn: 'engine-a', bound: true, client: 'mtls-a' });
    expect(call.claims?.cnf?.['x5t#S256']).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(rig.auth.tokenRequests.slice(before)).toEqual([{ certCn: 'engine-a', status: 200 }]);
  });

  it('two envs call the same handler, each with its own certificate and its own token', async () => {
    const engine = rig.engine(
      getDb(),
      rig.oauthEnv(rig.mtlsService, {
        FLOW_HANDLER_LEDGER_OAUTH_CLIENT_ID__TEAM_A: 'mtls-a',
        FLOW_HANDLER_LEDGER_TLS_CERT_FILE__TEAM_A: rig.certA.certFile,
        FLOW_HANDLER_LEDGER_TLS_KEY_FILE__TEAM_A: rig.certA.keyFile,
        FLOW_HANDLER_LEDGER_OAUTH_CLIENT_ID__TEAM_B: 'mtls-b',
        FLOW_HANDLER_LEDGER_TLS_CERT_FILE__TEAM_B: rig.certB.certFile,
        FLOW_HANDLER_LEDGER_TLS_KEY_FILE__TEAM_B: rig.certB.keyFile,
      }),
    );
    const seen = rig.mtlsService.calls.length;
    for (let i = 0; i < 2; i++) {
      for (const env of ['team-a', 'team-b']) expect((await rig.run(engine, env)).state).toBe('completed');
    }
    const calls = rig.mtlsService.calls.slice(seen);
    expect(calls.map((c) => ({ env: c.env, cn: c.certCn, client: c.claims?.client_id, bound: c.bound, status: c.status }))).toEqual([
      { env: 'team-a', cn: 'engine-a', client: 'mtls-a', bound: true, status: 200 },
      { env: 'team-b', cn: 'engine-b', client: 'mtls-b', bound: true, status: 200 },
      { env: 'team-a', cn: 'engine-a', client: 'mtls-a', bound: true, status: 200 },
      { env: 'team-b', cn: 'engine-b', client: 'mtls-b', bound: true, status: 200 },
    ]);
    // one token per env, each used for both of its env's calls and never for the other's
    const tokens = (env: string) => new Set(calls.filter((c) => c.env === env).map((c) => c.token));
    expect(tokens('team-a').size).toBe(1);
    expect(tokens('team-b').size).toBe(1);
    expect([...tokens('team-a')][0]).not.toBe([...tokens('team-b')][0]);
  });

  it('a certificate from a CA the service does not trust is refused by the service: the step fails FLOW_M2M_TLS_REFUSED', async () => {
    const engine = rig.engine(getDb(), {
      FLOW_HANDLER_LEDGER_URL: rig.mtlsService.url,
      FLOW_HANDLER_LEDGER_TOKEN: 'static-token',
      FLOW_HANDLER_LEDGER_TLS_CA_FILE: rig.ca.caFile,
      FLOW_HANDLER_LEDGER_TLS_CERT_FILE: rig.rogue.certFile,
      FLOW_HANDLER_LEDGER_TLS_KEY_FILE: rig.rogue.keyFile,
    });
    const seen = rig.mtlsService.calls.length;
    const first = await rig.run(engine, 'acme');
    await settle(engine);
    const record = await engine.get(first.id, 'acme');
    // node's TLS server checks the certificate after the handshake and drops the connection (no
    // alert): that may also be a restart, so the attempts are retried, each failing the same way
    expect(record.state).toBe('dead_lettered');
    expect(record.error?.code).toBe('FLOW_M2M_TLS_REFUSED');
    expect(record.error?.message).toContain('client certificate');
    expect(new Set(record.steps.map((a) => a.error?.code))).toEqual(new Set(['FLOW_M2M_TLS_REFUSED']));
    expect(rig.mtlsService.calls.length).toBe(seen);
  });

  it('no certificate where the service requires one: a TLS alert, and the step fails FLOW_M2M_TLS_REFUSED for good', async () => {
    const engine = rig.engine(getDb(), { FLOW_HANDLER_LEDGER_URL: rig.mtlsService.url, FLOW_HANDLER_LEDGER_TOKEN: 'static-token', FLOW_HANDLER_LEDGER_TLS_CA_FILE: rig.ca.caFile });
    const record = await rig.run(engine, 'acme');
    expect(record.state).toBe('failed');
    expect(record.steps.map((a) => a.attempt)).toEqual([1]);
    expect(record.error?.code).toBe('FLOW_M2M_TLS_REFUSED');
    expect(record.error?.message).toContain('CERTIFICATE_REQUIRED');
  });

  it('the authorization server refuses a token to a certificate that is not the client’s: FLOW_M2M_CLIENT_REFUSED', async () => {
    const engine = rig.engine(
      getDb(),
      rig.oauthEnv(rig.mtlsService, {
        FLOW_HANDLER_LEDGER_OAUTH_CLIENT_ID: 'mtls-a',
        FLOW_HANDLER_LEDGER_TLS_CERT_FILE: rig.certB.certFile,
        FLOW_HANDLER_LEDGER_TLS_KEY_FILE: rig.certB.keyFile,
      }),
    );
    const record = await rig.run(engine, 'acme');
    expect(record.state).toBe('failed');
    expect(record.error?.code).toBe('FLOW_M2M_CLIENT_REFUSED');
  });
});
