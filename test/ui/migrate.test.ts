import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeService } from '../support/fake-service.ts';
import { type ConsoleEnv, HAVE_CHROMIUM, startConsoleEnv } from './harness.ts';

/**
 * The migration page and a version's events and messages, in chromium against a real engine:
 * payments waiting for an approval on payments.capture@2 move to @3 (which adds a fraud check and
 * a ledger settlement) through the dry run and the job, every request the API's.
 */
describe.skipIf(!HAVE_CHROMIUM)('migrating instances in the console', () => {
  let env: ConsoleEnv;
  const payment = (paymentId: string, accountId: string) => ({
    logicId: 'payments.capture',
    version: 2,
    input: { paymentId, accountId, amount: 75.5, currency: 'EUR' },
    correlationId: paymentId,
  });
  beforeAll(async () => {
    const svc = await new FakeService().listen();
    env = await startConsoleEnv({ sub: 'ops@payments', scope: 'flow:admin', svc });
  });
  afterAll(async () => {
    await env?.close();
  });

  it('dry-runs a migration from @2 to @3 (a bad rename map shown as the API refused it), then moves the parked payment it said would move', async () => {
    const parked = (await env.engine.start(payment('pay-mig-1', 'acct-risky'))).id;
    const other = (await env.engine.start(payment('pay-mig-2', 'acct-risky'))).id;
    const ended = (await env.engine.start(payment('pay-mig-3', 'acct-1'))).id;
    expect((await env.engine.settled(parked)).state).toBe('waiting');
    expect((await env.engine.settled(other)).state).toBe('waiting');
    expect((await env.engine.settled(ended)).state).toBe('completed');

    const page = env.page;
    await page.goto(`${env.url}/ui/versions/payments.capture/2`);
    await page.getByRole('link', { name: /^Migrate its instances/ }).click();
    const form = page.getByTestId('migrate-form');
    await form.waitFor();
    await expect(form.getByLabel('from version').inputValue()).resolves.toBe('2');
    await expect(form.getByLabel('to version').inputValue()).resolves.toBe('3');

    // the API's problem+json, code and each problem, not a generic failure
    await form.getByLabel('renames').fill('nope=approval, approval=gone');
    await form.getByRole('button', { name: 'Dry run' }).click();
    const alert = page.locator('[role=alert][data-code=FLOW_MIGRATE_BAD_RENAME]');
    await alert.waitFor();
    await expect(alert.locator('ul.problems li').allTextContents()).resolves.toEqual([
      'nope is not a step of payments.capture@2',
      'gone (the new name of approval) is not a step of payments.capture@3',
      "approval is renamed, but payments.capture@3 has a step approval too: its calls would carry the keys approval's calls carried",
    ]);
    await env.shot('console-migrate-refused');

    await form.getByLabel('renames').fill('');
    await form.getByLabel('ids').fill(`${parked}\n${ended}`);
    await form.getByRole('button', { name: 'Dry run' }).click();
    const plan = page.getByTestId('migrate-plan');
    await expect(plan.getByTestId('plan-summary').textContent()).resolves.toBe('payments.capture@2 → @3: 2 selected, 1 would move, 1 refused.');
    await expect(page.getByRole('alert').count()).resolves.toBe(0);
    const moves = plan.locator(`[data-testid=plan-item][data-id="${parked}"]`);
    await expect(moves.getByTestId('lands').textContent()).resolves.toBe('moves to @3 at approval');
    // what runs next on @3 once approved: @3's new fraud check, under its key (the simulation stops at a call never made)
    await expect(moves.getByTestId('next').textContent()).resolves.toBe(
      `if decision approval = approve: approved fraudCheck ↗ ${parked}:fraudCheck:0 then pending at fraudCheck`,
    );
    const refused = plan.locator(`[data-testid=plan-item][data-id="${ended}"]`);
    await expect(refused.getByTestId('refusal').textContent()).resolves.toMatch(/^stays FLOW_MIGRATE_STATE /);
    await env.shot('console-migrate-dry-run');

    await plan.getByLabel('migrate reason').fill('fraud check for parked approvals');
    await plan.getByRole('button', { name: 'Migrate 1 instance to @3' }).click();
    await page.locator('[data-testid=migrate-job][data-state=done]').waitFor();
    await expect(page.getByTestId('bulk-progress').textContent()).resolves.toBe('1 / 1 done · 0 failed');
    await expect(moves.getByTestId('moved').getAttribute('data-status')).resolves.toBe('ok');
    await expect(moves.getByTestId('moved').textContent()).resolves.toBe('ok now waiting');
    await env.shot('console-migrate-applied');

    expect((await env.engine.get(parked)).version).toBe(3);
    expect((await env.engine.get(other)).version).toBe(2);
    expect((await env.engine.get(ended)).version).toBe(2);
    const audit = await env.engine.ops.audit(parked);
    expect(audit.map((a) => [a.verb, a.actor, a.reason])).toContainEqual(['migrate', 'ops@payments', 'fraud check for parked approvals']);
  });

  it('a token without flow:migrate for the definition sees the dry run disabled, naming the scope', async () => {
    const page = await env.browser.newPage();
    const token = await env.token({ sub: 'viewer@payments', scope: 'flow:read flow:migrate:statements.*' });
    await page.addInitScript((t) => (globalThis as unknown as { sessionStorage: { setItem(k: string, v: string): void } }).sessionStorage.setItem('flow.token', t), token);
    await page.goto(`${env.url}/ui/migrate/payments.capture?from=2`);
    const dryRun = page.getByTestId('migrate-form').getByRole('button', { name: /^Dry run/ });
    await dryRun.waitFor();
    await expect(dryRun.isDisabled()).resolves.toBe(true);
    await expect(dryRun.getAttribute('title')).resolves.toBe('needs scope flow:migrate for payments.capture');
    await page.close();
  });

  it("a version's page lists its start and message triggers and the waitFor steps with their messages", async () => {
    const page = env.page;
    await page.goto(`${env.url}/ui/versions/payments.capture/3`);
    const triggers = page.getByTestId('triggers');
    const route = triggers.locator('[data-testid=message-triggers] tr[data-event="ledger.funds_settled"]');
    await route.waitFor();
    await expect(route.locator('td').allTextContents()).resolves.toEqual([
      'ledger.funds_settled',
      'funds.settled',
      'attribute paymentId = event.payload.paymentId',
      '{"ledgerRef": event.payload.ledgerRef, "amount": event.payload.amount}',
    ]);
    await expect(triggers.getByText('No event starts an instance of this version.').count()).resolves.toBe(1);
    const wait = triggers.locator('[data-testid=wait-steps] tr[data-step=settled]');
    await expect(wait.locator('td').allTextContents()).resolves.toEqual([
      'settled',
      'funds.settled',
      'P7D',
      'events ledger.funds_settled; POST …/workflows/{id}/messages/funds.settled',
    ]);
    await env.shot('console-version-messages');

    await page.goto(`${env.url}/ui/versions/statements.monthly/2`);
    const start = page.locator('[data-testid=start-triggers] tr[data-event="account.opened"]');
    await start.waitFor();
    await expect(start.locator('td').nth(1).textContent()).resolves.toContain('event.payload.accountId');
    await expect(page.getByTestId('triggers').getByText('No waitFor step.').count()).resolves.toBe(1);
  });
});
