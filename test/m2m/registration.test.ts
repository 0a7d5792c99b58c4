import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeEachDriver } from '../support/db.ts';
import { everyRow, Rig, SECRETS_KEY } from './rig.ts';

describeEachDriver('dynamic client registration (RFC 7591) kept in Postgres', (getDb) => {
  let rig: Rig;
  const registering = (handler: string) => ({
    [`FLOW_HANDLER_${handler}_URL`]: rig.mtlsService.url,
    [`FLOW_HANDLER_${handler}_OAUTH_ISSUER`]: rig.auth.issuer,
    [`FLOW_HANDLER_${handler}_OAUTH_REGISTER`]: 'tls_client_auth',
    [`FLOW_HANDLER_${handler}_OAUTH_RESOURCE`]: 'https://ledger.test',
    [`FLOW_HANDLER_${handler}_TLS_CA_FILE`]: rig.ca.caFile,
    [`FLOW_HANDLER_${handler}_TLS_CERT_FILE`]: rig.certA.certFile,
    [`FLOW_HANDLER_${handler}_TLS_KEY_FILE`]: rig.certA.keyFile,
    FLOW_SECRETS_KEY: SECRETS_KEY,
  });
  beforeAll(async () => {
    rig = await new Rig().start();
  }, 60_000);
  afterAll(async () => {
    await rig.close();
  });

  it('the first engine registers at boot with its certificate; a second finds the registration and uses the same client', async () => {
    const before = rig.auth.registrations;
    const first = rig.engine(getDb(), registering('LEDGER'));
    await first.identities.prepare();
    expect(rig.auth.registrations - before).toBe(1);
    const second = rig.engine(getDb(), registering('LEDGER'));
    await second.identities.prepare();
    expect(rig.auth.registrations - before).toBe(1);
    expect((await rig.run(first, 'acme')).state).toBe('completed');
    expect((await rig.run(second, 'acme')).state).toBe('completed');
    const [a, b] = rig.mtlsService.calls.slice(-2);
    expect(a!.claims?.client_id).toMatch(/.+/);
    expect(b!.claims?.client_id).toBe(a!.claims?.client_id);
    expect([a!.bound, b!.bound, a!.certCn]).toEqual([true, true, 'engine-a']);
    // kept sealed: neither the client id nor the identity's secrets appear in any row
    const rows = await everyRow(getDb());
    expect(rows).toContain('LEDGER');
    expect(rows.includes(a!.claims!.client_id!)).toBe(false);
  });

  it('self_signed_tls_client_auth registers the certificate itself (a JWK with x5c), and the tokens are bound to it', async () => {
    const engine = rig.engine(getDb(), {
      ...registering('LEDGER'),
      FLOW_HANDLER_LEDGER_OAUTH_REGISTER__SELF: 'self_signed_tls_client_auth',
      FLOW_HANDLER_LEDGER_TLS_CERT_FILE__SELF: rig.certB.certFile,
      FLOW_HANDLER_LEDGER_TLS_KEY_FILE__SELF: rig.certB.keyFile,
    });
    const before = rig.auth.registrations;
    await engine.identities.prepare();
    expect(rig.auth.registrations - before).toBe(1); // LEDGER itself was registered by the test above
    expect((await rig.run(engine, 'self')).state).toBe('completed');
    const call = rig.mtlsService.calls.at(-1)!;
    expect({ env: call.env, cn: call.certCn, bound: call.bound }).toEqual({ env: 'self', cn: 'engine-b', bound: true });
  });

  it('two engines booting at once register once', async () => {
    const before = rig.auth.registrations;
    const engines = [rig.engine(getDb(), registering('AUDIT')), rig.engine(getDb(), registering('AUDIT'))];
    await Promise.all(engines.map((e) => e.identities.prepare()));
    expect(rig.auth.registrations - before).toBe(1);
  });

  it('a registration that does not open with the configured key stops boot with FLOW_M2M_REGISTRATION_FAILED', async () => {
    const other = { ...registering('LEDGER'), FLOW_SECRETS_KEY: Buffer.alloc(32, 7).toString('base64') };
    const engine = rig.engine(getDb(), other);
    await expect(engine.identities.prepare()).rejects.toMatchObject({ code: 'FLOW_M2M_REGISTRATION_FAILED' });
  });
});
