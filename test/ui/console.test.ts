import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeService } from '../support/fake-service.ts';
import { type ConsoleEnv, HAVE_CHROMIUM, logic, startConsoleEnv } from './harness.ts';

/**
 * The console end to end in Debian's chromium, against a real engine with workers and the HTTP
 * API: every click goes through the API with the signed-in bearer token. Waits are for what the
 * page shows (never for time), and each test saves a screenshot.
 */

// ui.flaky: one call that dead-letters on its first 503 (one attempt), then a pass
const flaky = logic({
  logicId: 'ui.flaky',
  start: 'charge',
  steps: {
    charge: { kind: 'proxy', handler: 'TEST', method: 'POST', path: '/charge', retry: { maxAttempts: 1 }, next: 'done' },
    done: { kind: 'pass' },
  },
} as never);
// ui.slow: a call the owning service answers only when the test lets it
const slow = logic({
  logicId: 'ui.slow',
  start: 'work',
  steps: {
    work: { kind: 'proxy', handler: 'TEST', method: 'POST', path: '/slow', next: 'finish' },
    finish: { kind: 'pass' },
  },
} as never);

// ui.acct: instances found by an account attribute, each done at once
const acct = logic({
  logicId: 'ui.acct',
  start: 'note',
  attributes: { accountId: { value: 'input.accountId' }, amount: { value: 'input.amount' } },
  steps: { note: { kind: 'pass' } },
} as never);

let chargeUp = false;
let release: () => void = () => {};
const gate = new Promise<void>((r) => {
  release = r;
});

describe.skipIf(!HAVE_CHROMIUM)('the console in chromium', () => {
  let env: ConsoleEnv;
  const payment = (paymentId: string, accountId: string) => ({ logicId: 'payments.capture', input: { paymentId, accountId, amount: 75.5, currency: 'EUR' }, correlationId: paymentId });

  beforeAll(async () => {
    const svc = await new FakeService()
      .on('/charge', () => (chargeUp ? { status: 200, body: { charged: true } } : { status: 503, body: { message: 'card network down' } }))
      .on('/slow', async () => {
        await gate;
        return { status: 200, body: { worked: true } };
      })
      .listen();
    env = await startConsoleEnv({ sub: 'alice@payments', scope: 'flow:admin payments:approve', logics: [flaky, slow, acct], svc });
  });
  afterAll(async () => {
    release();
    await env?.close();
  });

  it('marks the failed step of a declined payment, and a repair with new input (previewed first) completes it', async () => {
    const { id } = await env.engine.start(payment('pay-declined-1', 'acct-2'));
    expect((await env.engine.settled(id)).state).toBe('compensated');
    const page = env.page;
    await page.goto(`${env.url}/ui/instances/${id}`);
    await page.locator('svg.diagram g[data-step="capture"][data-mark="failed"]').waitFor();
    await page.locator('svg.diagram g[data-step="reserve"][data-mark="compensated"]').waitFor();
    await env.shot('console-failed-payment');

    await page.getByRole('button', { name: 'repair' }).click();
    const dialog = page.getByTestId('dialog-repair');
    await dialog.getByLabel('step').selectOption('reserve');
    const input = dialog.getByRole('textbox', { name: 'new input' });
    await input.fill(JSON.stringify({ paymentId: 'pay-fixed-1', accountId: 'acct-2', amount: -1, currency: 'EUR' }));
    // the editor checks the workflow's input schema before anything is sent
    await dialog.getByTestId('json-problems').getByText('amount').waitFor();
    await input.fill(JSON.stringify({ paymentId: 'pay-fixed-1', accountId: 'acct-2', amount: 75.5, currency: 'EUR' }));
    await dialog.getByRole('button', { name: 'Preview' }).click();
    const preview = dialog.getByTestId('verb-preview');
    await preview.getByText('capture').first().waitFor();
    await expect(preview.locator('code').first().textContent()).resolves.toMatch(/:1$|g1|1/);
    await env.shot('console-repair-preview');
    await dialog.getByLabel('reason').fill('card re-issued; new payment id');
    await dialog.getByRole('button', { name: 'Confirm repair' }).click();

    await page.locator('[data-testid=instance][data-state=completed]').waitFor();
    await page.locator('svg.diagram g[data-step="capture"][data-mark="done"]').waitFor();
    const record = await env.engine.get(id);
    expect(record.state).toBe('completed');
    expect((record.input as { paymentId: string }).paymentId).toBe('pay-fixed-1');
    const audit = await env.engine.ops.audit(id);
    expect(audit.map((a) => [a.verb, a.actor, a.reason])).toContainEqual(['repair', 'alice@payments', 'card re-issued; new payment id']);
    await env.shot('console-repaired');
  });

  it('answers a decision through the form generated from its options and schema; the audit names the token subject', async () => {
    const { id } = await env.engine.start(payment('pay-risky-1', 'acct-risky'));
    expect((await env.engine.settled(id)).state).toBe('waiting');
    const page = env.page;
    await page.goto(`${env.url}/ui/instances/${id}`);
    const form = page.getByTestId('decision-form');
    await form.getByLabel('note', { exact: true }).fill('known customer, checked by phone');
    await env.shot('console-decision');
    await form.locator('button[data-option=approve]').click();

    await page.locator('[data-testid=instance][data-state=completed]').waitFor();
    await page.locator('[data-testid=audit-row]', { hasText: 'alice@payments' }).waitFor();
    const audit = await env.engine.ops.audit(id);
    expect(audit.map((a) => [a.verb, a.actor])).toContainEqual(['resume', 'alice@payments']);
    const args = audit.find((a) => a.verb === 'resume')!.args as { option: string; payload: { note: string } };
    expect(args.option).toBe('approve');
    expect(args.payload.note).toBe('known customer, checked by phone');
  });

  it('retries 20 dead-lettered instances as one bulk job with progress and a result per instance', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push((await env.engine.start({ logicId: 'ui.flaky', input: { n: i } })).id);
    for (const id of ids) expect((await env.engine.settled(id)).state).toBe('dead_lettered');
    chargeUp = true;

    const page = env.page;
    await page.goto(`${env.url}/ui/instances?state=dead_lettered&logicId=ui.flaky`);
    const bulk = page.getByTestId('bulk');
    await bulk.getByLabel('bulk verb').selectOption('retry');
    await bulk.getByRole('button', { name: 'Preview' }).click();
    await bulk.getByTestId('bulk-preview').getByText('20', { exact: true }).waitFor();
    await env.shot('console-instances-bulk-preview');
    await bulk.getByLabel('bulk reason').fill('card network is back');
    await bulk.getByRole('button', { name: /^Run retry on 20/ }).click();

    await page.getByTestId('bulk-progress').waitFor();
    await page.locator('[data-testid=bulk-job][data-state=done]').waitFor();
    await expect(page.getByTestId('bulk-progress').textContent()).resolves.toContain('20 / 20 done · 0 failed');
    await expect(page.locator('[data-testid=bulk-items] tbody tr').count()).resolves.toBe(20);
    await expect(page.locator('[data-testid=bulk-items] tbody tr.item-ok').count()).resolves.toBe(20);
    await env.shot('console-bulk-retry');
    for (const id of ids) expect((await env.engine.settled(id)).state).toBe('completed');
    await page.goto(`${env.url}/ui/`);
    await page.getByText('Instances by state').waitFor();
    await env.shot('console-overview');
  });

  it('filters the instance list by search attributes and by SLA breach, and the overview counts and lists breaches', async () => {
    const ids: Record<string, string> = {};
    for (const [k, accountId, amount] of [['one', 'acct-31', 10], ['two', 'acct-32', 20], ['three', 'acct-32', 900]] as const) {
      ids[k] = (await env.engine.start({ logicId: 'ui.acct', input: { accountId, amount } })).id;
      await env.engine.settled(ids[k]!);
    }
    const page = env.page;
    await page.goto(`${env.url}/ui/instances?logicId=ui.acct`);
    await page.locator('[data-testid=instances] tbody tr').nth(2).waitFor();
    await page.getByLabel('attributes').fill('accountId=acct-32, amount.lt=100');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/attr\.accountId=acct-32/);
    // the unfiltered list shows `two` too: the filtered one is there once the others have gone
    const row = (k: string) => page.locator('[data-testid=instances] tbody tr').filter({ hasText: ids[k]!.slice(0, 8) });
    await row('one').waitFor({ state: 'detached' });
    await row('three').waitFor({ state: 'detached' });
    await row('two').waitFor();
    await expect(page.locator('[data-testid=instances] tbody tr').count()).resolves.toBe(1);
    // the bulk preview takes the same filter
    await page.getByTestId('bulk').getByRole('button', { name: 'Preview' }).click();
    await page.getByTestId('bulk-preview').getByText('1', { exact: true }).waitFor();
    await env.shot('console-instances-attributes');
    // an instance shows its attributes, each a link to the instances that share it
    await page.goto(`${env.url}/ui/instances/${ids['three']}`);
    await page.getByTestId('attributes').getByText('accountId=acct-32').click();
    await page.waitForURL(/attr\.accountId=acct-32/);
    await page.locator('[data-testid=instances] tbody tr').nth(1).waitFor();
    await expect(page.locator('[data-testid=instances] tbody tr').count()).resolves.toBe(2);

    await env.engine.db.pool.query(
      `INSERT INTO sla_breaches (env_id, workflow_id, logic_id, step, within) SELECT env_id, id, logic_id, '', 'PT1H' FROM workflows WHERE id = $1`,
      [ids['three']],
    );
    await page.goto(`${env.url}/ui/`);
    await page.getByTestId('sla-breach-list').getByText('ui.acct').waitFor();
    await expect(page.getByTestId('sla-breaches').textContent()).resolves.toBe('1');
    await page.getByTestId('sla-breaches').getByRole('link').click();
    await page.locator('[data-testid=instances] tbody tr').filter({ hasText: ids['three']!.slice(0, 8) }).waitFor();
    await expect(page.locator('[data-testid=instances] tbody tr').count()).resolves.toBe(1);
    await env.shot('console-sla-breached');
  });

  it('shows a version with its diagram, hash and in-flight count, and retires it (new starts refused)', async () => {
    const page = env.page;
    await page.goto(`${env.url}/ui/versions/payments.capture/3`);
    await page.locator('svg.diagram g[data-step="capture"]').waitFor();
    await page.getByText(/^sha256:/).waitFor();
    await env.shot('console-version');
    await page.getByRole('button', { name: /^Retire/ }).click();
    await page.getByRole('button', { name: 'Reactivate' }).waitFor();
    await expect(env.engine.start({ ...payment('pay-after-retire', 'acct-1'), version: 3 })).rejects.toMatchObject({ code: 'FLOW_VERSION_RETIRED' });
    await page.getByRole('button', { name: 'Reactivate' }).click();
    await page.getByRole('button', { name: /^Retire/ }).waitFor();
    const { id } = await env.engine.start({ ...payment('pay-after-reactivate', 'acct-1'), version: 3 });
    expect((await env.engine.settled(id)).state).toBe('completed');
  });

  it('lists the schedules with their next tick; pauses, resumes and triggers one', async () => {
    const page = env.page;
    await page.goto(`${env.url}/ui/schedules`);
    const row = page.locator('tr[data-schedule="statements.monthly:house-account"]');
    await row.getByText('Europe/Berlin').waitFor();
    await row.getByRole('button', { name: 'Pause' }).click();
    await row.getByRole('button', { name: 'Resume' }).waitFor();
    expect((await env.engine.schedules.get(env.engine.env, 'statements.monthly:house-account')).paused).toBe(true);
    await row.getByRole('button', { name: 'Resume' }).click();
    await row.getByRole('button', { name: 'Pause' }).waitFor();
    await row.getByRole('button', { name: 'Trigger now' }).click();
    const link = page.getByTestId('triggered').locator('a');
    await link.waitFor();
    const started = await env.engine.get((await link.textContent())!);
    expect(started.logicId).toBe('statements.monthly');
    await env.shot('console-schedules');
  });

  it('disables the buttons a read-only token may not use, naming the missing scope', async () => {
    chargeUp = false;
    const { id } = await env.engine.start({ logicId: 'ui.flaky', input: { n: 'read-only' } });
    expect((await env.engine.settled(id)).state).toBe('dead_lettered');
    const page = await env.browser.newPage();
    await page.addInitScript((t) => (globalThis as unknown as { sessionStorage: { setItem(k: string, v: string): void } }).sessionStorage.setItem('flow.token', t), await env.token({ sub: 'viewer@example.com', scope: 'flow:read' }));
    await page.goto(`${env.url}/ui/instances/${id}`);
    const retry = page.getByRole('button', { name: /^retry/ });
    await retry.waitFor();
    await expect(retry.isDisabled()).resolves.toBe(true);
    await expect(retry.getAttribute('title')).resolves.toBe('needs scope flow:retry for ui.flaky');
    await page.close();
  });

  it('a tenant token opens its own env, offers its envs in a picker, and a forbidden env says how to switch', async () => {
    await env.engine.publishVersion('tenant-a', flaky);
    chargeUp = false;
    const { id } = await env.engine.start({ logicId: 'ui.flaky', input: { n: 'tenant' }, env: 'tenant-a' });
    expect((await env.engine.settled(id, { env: 'tenant-a' })).state).toBe('dead_lettered');
    const page = await env.browser.newPage();
    const token = await env.token({ sub: 'tenant@a', scope: 'flow:read', envs: ['tenant-a', 'tenant-b'] });
    await page.addInitScript((t) => (globalThis as unknown as { sessionStorage: { setItem(k: string, v: string): void } }).sessionStorage.setItem('flow.token', t), token);
    await page.goto(`${env.url}/ui/`);
    const picker = page.getByRole('combobox', { name: 'env' });
    await picker.waitFor();
    await expect(picker.inputValue()).resolves.toBe('tenant-a');
    await page.locator(`a[href="/ui/instances/${id}"]`).first().waitFor();
    await expect(page.getByRole('alert').count()).resolves.toBe(0);
    await expect(picker.locator('option').allTextContents()).resolves.toEqual(['tenant-a', 'tenant-b']);

    await page.goto(`${env.url}/ui/?env=default`);
    const alert = page.getByRole('alert');
    await alert.waitFor();
    await expect(alert.textContent()).resolves.toMatch(/FLOW_ENV_FORBIDDEN.*\?env=/);
    await page.close();
  });

  it('updates the instance page live while a step runs, without a reload', async () => {
    const { id } = await env.engine.start({ logicId: 'ui.slow', input: {} });
    const page = env.page;
    await page.goto(`${env.url}/ui/instances/${id}`);
    await page.locator('[data-testid=attempt-row][data-step=work][data-state=running]').waitFor();
    await page.locator('svg.diagram g[data-step="work"][data-mark="current"]').waitFor();
    await env.shot('console-live-running');
    // a reload would drop this marker
    await page.evaluate(() => {
      (globalThis as unknown as { marker: number }).marker = 42;
    });
    release();
    await page.locator('[data-testid=instance][data-state=completed]').waitFor();
    await page.locator('[data-testid=attempt-row][data-step=work][data-state=succeeded]').waitFor();
    await expect(page.evaluate(() => (globalThis as unknown as { marker?: number }).marker)).resolves.toBe(42);
    await env.shot('console-live-done');
  });
});
