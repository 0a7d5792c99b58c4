import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEMO_HANDLERS, type DemoService, startDemoService } from '../../examples/demo-service.ts';
import { artifactModules, publishOrder, readArtifactDir } from '../../engine/runtime/artifacts.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { type Db, openDb } from '../../engine/store/db.ts';
import { migrate } from '../../engine/store/migrate.ts';
import { advance, settle } from '../support/engine.ts';

/**
 * Every example domain runs out of the box against the demo's owning service, as `npm run dev`
 * configures it: the compiled examples (the golden files test/compiler/compile-examples.test.ts
 * holds equal to examples/) on the embedded store, with one handler per domain.
 */
const COMPILED = fileURLToPath(new URL('../fixtures/compiled', import.meta.url));

describe('the examples run to completion against the demo service', { timeout: 120_000 }, () => {
  let svc: DemoService;
  let db: Db;
  let engine: Engine;
  beforeAll(async () => {
    svc = await startDemoService();
    db = await openDb();
    await migrate(db);
    engine = new Engine({ db, executors: { handlers: new Map(DEMO_HANDLERS.map((h) => [h, { url: svc.url }])) } });
    for (const doc of publishOrder(await readArtifactDir(COMPILED))) await engine.publishVersion(engine.env, doc, await artifactModules(COMPILED, doc));
  });
  afterAll(async () => {
    await engine?.close();
    await db?.close();
    await svc?.close();
  });

  it('payments: reserve, score, capture, notify', async () => {
    const { id } = await engine.start({ logicId: 'payments.capture', input: { paymentId: 'pay-1', accountId: 'acct-1', amount: 12.5, currency: 'EUR' } });
    await settle(engine);
    const record = await engine.get(id);
    expect([record.state, record.error]).toEqual(['completed', null]);
  });

  it('provisioning: a tenant fans out one child per service, waits for DNS, and activates', async () => {
    const input = { tenantId: 'tn-1', plan: 'pro', services: [{ name: 'db', region: 'eu' }, { name: 'api', region: 'us' }] };
    const { id } = await engine.start({ logicId: 'provisioning.tenant', input });
    await settle(engine);
    expect((await engine.get(id)).state).toBe('waiting');
    await advance(engine, 5 * 60_000 + 1_000);
    const record = await engine.get(id);
    expect([record.state, record.error, record.output]).toEqual(['completed', null, { tenantId: 'tn-1', services: 2 }]);
    expect(svc.log.filter((r) => r.path === '/services/configure').length).toBe(2);
  });

  it('statements: an account.opened event enrols the account; a payload the input refuses starts nothing', async () => {
    const payload = { accountId: 'acc-1', currency: 'EUR', channel: 'web' };
    const { ids, matched } = await engine.ingestEvent({ type: 'account.opened', idempotencyKey: 'acc-1', payload });
    expect(matched).toBe(true);
    await settle(engine);
    const record = await engine.get(ids[0]!);
    expect([record.state, record.error]).toEqual(['completed', null]);
    await expect(
      engine.ingestEvent({ type: 'account.opened', idempotencyKey: 'acc-2', payload: { ...payload, accountId: 'acc-2', channel: 'fax' } }),
    ).rejects.toMatchObject({ code: 'FLOW_TRIGGER_INPUT_INVALID', status: 422 });
  });
});
