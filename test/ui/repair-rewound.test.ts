import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeService } from '../support/fake-service.ts';
import { type ConsoleEnv, HAVE_CHROMIUM, logic, startConsoleEnv } from './harness.ts';

/**
 * The repair dialog says which effects of the rewound steps stay in place, and can undo them
 * first: a hold that took effect, then a charge that dead-letters.
 */
const held = logic({
  logicId: 'ui.held',
  start: 'hold',
  steps: {
    hold: { kind: 'proxy', handler: 'TEST', path: '/hold', compensate: { kind: 'proxy', handler: 'TEST', path: '/unhold' }, next: 'charge' },
    charge: { kind: 'proxy', handler: 'TEST', path: '/charge', retry: { maxAttempts: 1 } },
  },
} as never);

let chargeUp = false;

describe.skipIf(!HAVE_CHROMIUM)('the repair dialog and the rewound effects', () => {
  let env: ConsoleEnv;
  let svc: FakeService;
  beforeAll(async () => {
    svc = await new FakeService()
      .on('/hold', () => ({ status: 200, body: { held: true } }))
      .on('/unhold', () => ({ status: 200, body: { unheld: true } }))
      .on('/charge', () => (chargeUp ? { status: 200, body: { charged: true } } : { status: 503 }))
      .listen();
    env = await startConsoleEnv({ sub: 'ops@example.com', scope: 'flow:admin', logics: [held], svc });
  });
  afterAll(async () => {
    await env?.close();
  });

  it('lists the effects that stay in place, and with "undo them first" runs their compensations before the re-run', async () => {
    const { id } = await env.engine.start({ logicId: 'ui.held', input: {} });
    expect((await env.engine.settled(id)).state).toBe('dead_lettered');
    const page = env.page;
    await page.goto(`${env.url}/ui/instances/${id}`);
    await page.getByRole('button', { name: 'repair' }).click();
    const dialog = page.getByTestId('dialog-repair');
    await dialog.getByLabel('step').selectOption('hold');
    await dialog.getByRole('button', { name: 'Preview' }).click();
    await dialog.getByTestId('kept-effects').getByText(`${id}:hold:0:compensate`).waitFor();
    await env.shot('console-repair-kept-effects');

    await dialog.getByLabel('undo rewound effects first').check();
    await dialog.getByRole('button', { name: 'Preview' }).click();
    await dialog.getByTestId('verb-preview').getByText(`${id}:hold:0:compensate`).waitFor();
    expect(await dialog.getByTestId('kept-effects').count()).toBe(0);
    chargeUp = true;
    const from = svc.received.length;
    await dialog.getByLabel('reason').fill('hold again');
    await dialog.getByRole('button', { name: 'Confirm repair' }).click();
    expect((await env.engine.settled(id)).state).toBe('completed');
    expect(svc.received.slice(from).map((c) => c.headers['idempotency-key'])).toEqual([`${id}:hold:0:compensate`, `${id}:hold:1`, `${id}:charge:1`]);
  });
});
