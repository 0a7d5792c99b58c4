import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { REPO } from '../compiler/project-helpers.ts';

/** Every variable engine/config.ts parses (its schema's keys) has a row in README.md's configuration table. */
it('every FLOW_ setting the config reads is documented in the README', () => {
  const config = readFileSync(join(REPO, 'engine/config.ts'), 'utf8');
  const readme = readFileSync(join(REPO, 'README.md'), 'utf8');
  const read = [...config.matchAll(/^ {2}(FLOW_[A-Z0-9_]+):/gm)].map((m) => m[1]!);
  expect(read.length).toBeGreaterThan(20);
  expect(read.filter((name) => !readme.includes(`| \`${name}\``) && !readme.includes(`, \`${name}\``))).toEqual([]);
});
