import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeService } from '../support/fake-service.ts';
import { type ConsoleEnv, HAVE_CHROMIUM, logic, startConsoleEnv } from './harness.ts';

/**
 * The compatibility report on a version's page and the handler usage page, in chromium against a
 * real engine: v1 of a shipment waits for a confirmation (or, held, for a release) and then ships;
 * v2 adds a fraud check and no longer has the hold, so the held instances cannot move.
 */
const v1 = logic({
  logicId: 'ui.ship',
  version: 1,
  start: 'route',
  steps: {
    route: { kind: 'choice', branches: [{ when: 'input.held = true', next: 'hold' }], otherwise: 'confirm' },
    hold: { kind: 'decision', options: ['release'], next: 'ship' },
    confirm: { kind: 'decision', options: ['ok'], next: 'ship' },
    ship: { kind: 'proxy', handler: 'TEST', path: '/ship' },
  },
} as never);
const v2 = logic({
  logicId: 'ui.ship',
  version: 2,
  start: 'confirm',
  steps: {
    confirm: { kind: 'decision', options: ['ok'], next: 'fraud' },
    fraud: { kind: 'proxy', handler: 'TEST', path: '/score', next: 'ship' },
    ship: { kind: 'proxy', handler: 'TEST', path: '/ship' },
  },
} as never);
// retired, nothing live: its path may go
const legacy = logic({ logicId: 'ui.legacy', start: 'old', steps: { old: { kind: 'proxy', handler: 'TEST', path: '/legacy' } } } as never);

describe.skipIf(!HAVE_CHROMIUM)('versions and handlers in the console', () => {
  let env: ConsoleEnv;
  beforeAll(async () => {
    const svc = await new FakeService().listen();
    env = await startConsoleEnv({ sub: 'ops@example.com', scope: 'flow:admin', logics: [v1, v2, legacy], svc });
    await env.engine.setVersionActive(env.engine.env, 'ui.legacy', 1, false);
    for (const held of [false, false, false, true, true]) {
      const { id } = await env.engine.start({ logicId: 'ui.ship', version: 1, input: { held } });
      expect((await env.engine.settled(id)).state).toBe('waiting');
    }
  });
  afterAll(async () => {
    await env?.close();
  });

  it("a version's page checks its live instances against a later version: groups, counts, and why each is safe or not", async () => {
    const page = env.page;
    await page.goto(`${env.url}/ui/versions/ui.ship/1`);
    const compat = page.getByTestId('compatibility');
    expect(await compat.getByLabel('candidate').inputValue()).toBe('2');
    await compat.getByRole('button', { name: 'Check the live instances of version 1' }).click();
    const verdict = compat.getByTestId('compat-verdict');
    await verdict.getByText('unsafe').waitFor();
    expect(await verdict.textContent()).toContain('ui.ship@1 → ui.ship@2: 5 live instances in 2 groups, 2 of them in unsafe groups');
    const confirm = compat.locator('[data-testid="compat-group"][data-step="confirm"]');
    expect(await confirm.locator('td').nth(1).textContent()).toBe('3');
    expect(await confirm.locator('td').nth(2).textContent()).toBe('safe');
    // what would run next: the confirmation answered with its first option, then the new fraud check and the shipping call
    expect(await confirm.locator('td').nth(4).textContent()).toBe('fraud ↗ → ship ↗, then completed at ship (assumes decision confirm = ok)');
    const hold = compat.locator('[data-testid="compat-group"][data-step="hold"]');
    expect(await hold.locator('td').nth(1).textContent()).toBe('2');
    expect(await hold.locator('td').nth(2).textContent()).toBe('unsafe');
    expect(await hold.locator('td').nth(3).textContent()).toContain('FLOW_COMPAT_STEP_MISSING step hold, where these instances are, is not in ui.ship@2');
    await env.shot('console-compatibility');
  });

  it('the handlers page says which paths may be turned off now, and where the live instances that still need one stand', async () => {
    const page = env.page;
    await page.goto(`${env.url}/ui/`);
    await page.getByRole('link', { name: 'Handlers' }).click();
    const test = page.locator('[data-testid="handler"][data-handler="TEST"]');
    const ship = test.locator('[data-testid="handler-path"][data-path="/ship"]');
    await ship.waitFor();
    expect(await ship.locator('td').nth(1).textContent()).toMatch(/^no/);
    // v1's five waiting instances all reach /ship, from where each group stands
    const groups = ship.locator('[data-testid="usage-group"][data-reach="ahead"]');
    expect(await groups.allTextContents()).toEqual(['3 waiting at confirm: its path reaches a call of it (ship)', '2 waiting at hold: its path reaches a call of it (ship)']);
    const legacyPath = test.locator('[data-testid="handler-path"][data-path="/legacy"]');
    expect(await legacyPath.locator('td').nth(1).textContent()).toBe('yesyes: every version that calls it (ui.legacy@1) is retired and none of their instances is live');
    expect(await test.locator('.reason').first().textContent()).toBe('no: 2 of its 3 paths are still needed: /score, /ship');
    await env.shot('console-handlers');
  });
});
