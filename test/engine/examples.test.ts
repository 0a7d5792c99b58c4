import { fileURLToPath } from 'node:url';
import type { CompatibilityReport } from '../../contracts/api/compatibility.ts';
import type { LogicVersion } from '../../contracts/index.ts';
import { bearer, testApi } from '../api/support.ts';
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
    const { id } = await engine.start({ logicId: 'payments.capture', version: 2, input: { paymentId: 'pay-1', accountId: 'acct-1', amount: 12.5, currency: 'EUR' } });
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

/**
 * payments.capture@3 adds a fraud check and, for funds that settle through the ledger, waits for
 * `funds.settled`, which the ledger's `ledger.funds_settled` event delivers by the payment's id.
 * Before it is published, the compatibility report over the running @2 payments says which could
 * move to it (those parked on the approval: the fraud check runs before their capture) and which
 * could not (one past its capture, whose remaining path reads the fraud check it never ran).
 */
describe('payments.capture@3: the compatibility report over @2, and the ledger resuming payments waiting on funds.settled', { timeout: 120_000 }, () => {
  let svc: DemoService;
  let db: Db;
  let engine: Engine;
  let docs: LogicVersion[];
  const v3 = () => docs.find((d) => d.logicId === 'payments.capture' && d.version === 3)!;
  const payment = (paymentId: string, accountId: string, extra: Record<string, unknown> = {}) => ({
    paymentId,
    accountId,
    amount: 120,
    currency: 'EUR',
    ...extra,
  });
  beforeAll(async () => {
    svc = await startDemoService();
    db = await openDb();
    await migrate(db);
    engine = new Engine({ db, executors: { handlers: new Map(DEMO_HANDLERS.map((h) => [h, { url: svc.url }])) } });
    docs = publishOrder(await readArtifactDir(COMPILED));
    // @3 is not published yet: the report is what a team reads before publishing it
    for (const doc of docs.filter((d) => d !== v3())) await engine.publishVersion(engine.env, doc, await artifactModules(COMPILED, doc));
  });
  afterAll(async () => {
    await engine?.close();
    await db?.close();
    await svc?.close();
  });

  it('the report says the @2 payments parked on the approval can move and the one past its capture cannot', async () => {
    const parked = [];
    for (const id of ['pay-r1', 'pay-r2']) parked.push((await engine.start({ logicId: 'payments.capture', input: payment(id, 'acct-risky') })).id);
    // the mail service accepts the notification and never confirms it (its callback fails): the payment stays on notify
    svc.connect('http://127.0.0.1:9');
    const pastCapture = (await engine.start({ logicId: 'payments.capture', input: payment('pay-n1', 'acct-1') })).id;
    await settle(engine);
    expect((await engine.get(parked[0]!)).currentStep).toBe('approval');
    expect(await engine.get(pastCapture)).toMatchObject({ state: 'waiting', currentStep: 'notify' });

    // what `s8flow publish --check` asks: POST …/logic-versions/payments.capture/compatibility
    const api = await testApi(engine);
    const res = await api.app.inject({
      method: 'POST',
      url: `/v1/envs/${engine.env}/logic-versions/payments.capture/compatibility`,
      payload: { logicVersion: v3() },
      headers: await bearer({ scope: 'flow:publish:payments.*', envs: [engine.env] }),
    });
    await api.close();
    expect(res.statusCode).toBe(200);
    const report = res.json() as CompatibilityReport;
    expect(report).toMatchObject({ against: { version: 2 }, candidate: { version: 3 }, verdict: 'unsafe' });
    const byStep = new Map(report.groups.map((g) => [g.currentStep, g]));
    // parked on the approval: approved, they would run the fraud check before their capture
    const approval = byStep.get('approval')!;
    expect(approval).toMatchObject({ count: 2, verdict: 'safe', reasons: [] });
    expect(approval.next).toMatchObject({ assumes: 'decision approval = approve', stopsAt: { step: 'fraudCheck' } });
    expect(approval.next?.steps.map((s) => s.step)).toEqual(['approved', 'fraudCheck']);
    // past its capture: @3's output reads a fraud check this payment never ran
    expect(byStep.get('notify')).toMatchObject({
      count: 1,
      verdict: 'unsafe',
      representative: pastCapture,
      reasons: [expect.objectContaining({ code: 'FLOW_COMPAT_OUTPUT_MISSING', step: 'fraudCheck', readBy: 'output' })],
    });
  });

  it('published, @3 checks for fraud, and a payment that settles through the ledger waits until the ledger’s event resumes it', async () => {
    await engine.publishVersion(engine.env, v3(), await artifactModules(COMPILED, v3()));
    svc.connect('http://127.0.0.1:9'); // (still) notifications accepted and never confirmed
    const waiting = (await engine.start({ logicId: 'payments.capture', input: payment('pay-l1', 'acct-1', { settlement: 'ledger' }) })).id;
    const other = (await engine.start({ logicId: 'payments.capture', input: payment('pay-l2', 'acct-1', { settlement: 'ledger' }) })).id;
    await settle(engine);
    for (const id of [waiting, other]) expect(await engine.get(id)).toMatchObject({ version: 3, state: 'waiting', currentStep: 'settled' });
    expect(svc.log.filter((r) => r.path === '/fraud/check')).toHaveLength(2);

    const settled = await engine.ingestEvent({ type: 'ledger.funds_settled', idempotencyKey: 'ledger-991', payload: { paymentId: 'pay-l1', ledgerRef: 'L-991', amount: 120 } });
    expect(settled.delivered).toEqual([{ workflowId: waiting, message: 'funds.settled', status: 'delivered' }]);
    await settle(engine);
    const resumed = await engine.get(waiting);
    expect(resumed.steps.find((s) => s.step === 'settled')?.output).toEqual({ ledgerRef: 'L-991', amount: 120 });
    expect(resumed.steps.find((s) => s.step === 'capture')?.state).toBe('succeeded');
    expect(resumed.currentStep).toBe('notify');
    expect((await engine.get(other)).currentStep).toBe('settled');
    // the ledger sending the same event again captures nothing twice
    await engine.ingestEvent({ type: 'ledger.funds_settled', idempotencyKey: 'ledger-991', payload: { paymentId: 'pay-l1', ledgerRef: 'L-991', amount: 120 } });
    await settle(engine);
    expect(svc.log.filter((r) => r.path === '/funds/capture')).toHaveLength(2); // pay-n1 on @2, and pay-l1
  });
});
