import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { labelBox, layout, routeEdges } from '../../console/parts/mermaid.ts';
import { REPO } from '../compiler/project-helpers.ts';

const FIXTURES = join(REPO, 'test/fixtures/compiled');
const overlap = (a: ReturnType<typeof labelBox>, b: ReturnType<typeof labelBox>) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;

/** Edge labels of the console's diagram never cover each other, even where branches leave one choice close together. */
describe('diagram edge labels', () => {
  const diagrams = readdirSync(FIXTURES).filter((f) => f.endsWith('.mmd'));
  const fanOut = ['flowchart TD', '  s0{"pick<br/>choice"}', ...['a', 'b', 'c', 'd'].map((n, i) => `  s${i + 1}["${n}<br/>pass"]`), ...[1, 2, 3, 4].map((i) => `  s0 -->|"input.kind = #quot;k${i}#quot; and input.amount #gt; ${i}000"| s${i}`)].join('\n');
  for (const [name, mmd] of [...diagrams.map((f) => [f, readFileSync(join(FIXTURES, f), 'utf8')] as const), ['a four-way choice', fanOut] as const]) {
    it(`no two labels overlap: ${name}`, () => {
      const labelled = routeEdges(layout(mmd)).filter((e) => e.text !== null);
      const clashes: string[] = [];
      labelled.forEach((a, i) => {
        for (const b of labelled.slice(i + 1)) if (overlap(labelBox(a), labelBox(b))) clashes.push(`${a.label} × ${b.label}`);
      });
      expect(clashes).toEqual([]);
    });
  }
});
