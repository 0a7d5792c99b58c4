import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeService } from '../support/fake-service.ts';
import { type ConsoleEnv, HAVE_CHROMIUM, logic, startConsoleEnv } from './harness.ts';

/** An erased instance, as the console shows it: tombstones where its data was, its steps and times still there. */
const charge = logic({
  logicId: 'ui.erase',
  start: 'charge',
  steps: { charge: { kind: 'proxy', handler: 'TEST', path: '/charge', input: '{ "account": input.account }' } },
} as never);

describe.skipIf(!HAVE_CHROMIUM)('an erased instance in the console', () => {
  let env: ConsoleEnv;
  let svc: FakeService;
  beforeAll(async () => {
    svc = await new FakeService().on('/charge', () => ({ status: 200, body: { card: '4111-0000-SECRET' } })).listen();
    env = await startConsoleEnv({ sub: 'ops@example.com', scope: 'flow:admin', logics: [charge], svc });
  });
  afterAll(async () => {
    await env?.close();
  });

  it('erasing through the API needs flow:erase; the page then shows tombstones, not the data, and keeps the steps', async () => {
    const { id } = await env.engine.start({ logicId: 'ui.erase', input: { account: 'acct-SECRET-7' } });
    expect((await env.engine.settled(id)).state).toBe('completed');
    const erase = async (scope: string) =>
      fetch(`${env.url}/v1/envs/${env.engine.env}/workflows/${id}/erase`, {
        method: 'POST',
        headers: { authorization: `Bearer ${await env.token({ sub: 'dpo@example.com', scope })}`, 'content-type': 'application/json' },
        body: JSON.stringify({ reason: 'customer asked' }),
      });
    expect((await erase('flow:cancel')).status).toBe(403);
    const res = await erase('flow:erase');
    expect(res.status).toBe(200);

    const page = env.page;
    await page.goto(`${env.url}/ui/instances/${id}`);
    await page.getByText('This instance was erased').waitFor();
    await page.getByText('charge').first().waitFor();
    await env.shot('console-erased-instance');
    const text = (await page.locator('body').textContent()) ?? '';
    expect(text).not.toContain('SECRET');
    expect(text).toMatch(/erased \d/);
    // no verb can run on it (FLOW_INSTANCE_ERASED): none is offered
    expect(await page.getByRole('button', { name: 'replay' }).count()).toBe(0);
  });
});
