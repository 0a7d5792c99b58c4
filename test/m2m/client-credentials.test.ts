import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeEachDriver } from '../support/db.ts';
import { CLIENT_SECRET, Rig } from './rig.ts';

describeEachDriver('OAuth client credentials against a real authorization server', (getDb) => {
  let rig: Rig;
  beforeAll(async () => {
    rig = await new Rig().start();
  }, 60_000);
  afterAll(async () => {
    await rig.close();
  });

  it('a client secret: the service verifies the JWT the engine fetched for it', async () => {
    const engine = rig.engine(getDb(), rig.oauthEnv(rig.service, { FLOW_HANDLER_LEDGER_OAUTH_CLIENT_ID: 'secret-client', FLOW_HANDLER_LEDGER_OAUTH_CLIENT_SECRET: CLIENT_SECRET }));
    const record = await rig.run(engine, 'acme');
    expect(record.error).toBeNull();
    expect(record.state).toBe('completed');
    const call = rig.service.calls.at(-1)!;
    expect({ status: call.status, client: call.claims?.client_id, env: call.env }).toEqual({ status: 200, client: 'secret-client', env: 'acme' });
  });
});
