import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { STUCK_REASONS } from '../../engine/store/workflow-filter.ts';
import { REPO } from '../compiler/project-helpers.ts';

/** The stuck runbook names exactly the reasons the code gives, so an operator can look each one up. */
it('docs/operations.md names every stuck reason the code uses, and no other', () => {
  const text = readFileSync(join(REPO, 'docs/operations.md'), 'utf8');
  const runbook = text.slice(text.indexOf('## Runbook: stuck instances'), text.indexOf('## Runbook: dead-lettered instances'));
  const named = [...runbook.matchAll(/\*\*`([a-z_]+)`\*\*/g)].map((m) => m[1]);
  expect(named.sort()).toEqual([...STUCK_REASONS].sort());
});
