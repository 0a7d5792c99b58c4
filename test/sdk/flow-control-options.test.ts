import { expect, test } from 'vitest';
import { z } from 'zod';
import { lowerDraft } from '../../compiler/lower.ts';
import { LogicVersion } from '../../contracts/index.ts';
import { FlowSdkError, workflow } from '../../sdk/index.ts';

test('priority and throttleBudgetMs go from the SDK into the LogicVersion, and only when set', () => {
  const input = z.object({ n: z.number() });
  const set = workflow({ logicId: 'sdk.prio', version: 1, domain: 'ledger', input, priority: 5 })
    .proxy('charge', { path: '/charge', throttleBudgetMs: 60_000 })
    .http('notify', { method: 'POST', url: 'https://hooks.example/x', throttleBudgetMs: 0 })
    .definition();
  const lowered = lowerDraft(set, 'test', { node: () => undefined, label: () => '' }, []);
  const doc = LogicVersion.parse({ ...lowered, hash: `sha256:${'0'.repeat(64)}` });
  expect(doc.priority).toBe(5);
  expect(doc.steps['charge']).toMatchObject({ throttleBudgetMs: 60_000 });
  expect(doc.steps['notify']).toMatchObject({ throttleBudgetMs: 0 });
  // a definition that sets neither has neither field: its document, and so its hash, are as before
  const plain = lowerDraft(workflow({ logicId: 'sdk.plain', version: 1, domain: 'ledger', input }).proxy('charge', { path: '/charge' }).definition(), 'test', { node: () => undefined, label: () => '' }, []);
  expect(plain).not.toHaveProperty('priority');
  expect((plain['steps'] as Record<string, object>)['charge']).not.toHaveProperty('throttleBudgetMs');
  expect(() => workflow({ logicId: 'sdk.bad', version: 1, domain: 'ledger', input, priority: 1.5 })).toThrow(FlowSdkError);
});
