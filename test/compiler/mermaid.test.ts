import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { LogicVersion } from '../../contracts/logic-version.ts';
import { routesOf } from '../../contracts/validate.ts';
import { type CompileResult, compile } from '../../compiler/index.ts';
import { EXAMPLES, scratchProject } from './project-helpers.ts';

/**
 * The diagrams the compiler writes today, for the examples compiled now — not a checked-in
 * fixture, which would keep passing while the generator changed under it.
 */
const scratch = scratchProject({});
let compiled: CompileResult;
const diagramOf = (doc: LogicVersion) => readFileSync(join(compiled.outDir, `${doc.logicId}@${doc.version}.mmd`), 'utf8');
const docOf = (logicId: string) => compiled.versions.find((v) => v.doc.logicId === logicId)!.doc;

beforeAll(async () => {
  compiled = await compile({ root: EXAMPLES, out: join(scratch.dir, 'out'), lockPath: join(scratch.dir, 'flow.lock.json') });
});
afterAll(() => scratch.dispose());

describe('the Mermaid diagram the compiler writes for a version', () => {
  test('is a top-down flowchart naming the version and its hash', () => {
    const doc = docOf('payments.capture');
    expect(diagramOf(doc).split('\n').slice(0, 2)).toEqual(['flowchart TD', `  %% payments.capture@${doc.version} ${doc.hash}`]);
  });

  test('shows steps by kind, routes with their conditions, error routes and compensations', () => {
    const diagram = diagramOf(docOf('payments.capture'));
    expect(diagram).toContain('s0["reserve<br/>proxy POST /funds/reserve"]');
    expect(diagram).toContain('s3{{"approval<br/>decision: approve / reject (deadline P2D)"}}');
    expect(diagram).toContain('s1["score<br/>func risk.run"]');
    expect(diagram).toContain('s2 -->|"steps.score.needsApproval or (input.amount #gt;= 10000)"| s3');
    expect(diagram).toContain('s2 -->|otherwise| s4');
    expect(diagram).toContain('s6 -.->|onError| s8');
    expect(diagram).toContain('c0[/"undo: proxy POST /funds/release"/]');
    expect(diagram).toContain('s0 -.-o|compensate| c0');
    expect(diagram).toContain('s6 --> done');
  });

  test('every compiled version: each step is one node, each route one edge, each compensation one side node', () => {
    expect(compiled.versions.length).toBeGreaterThanOrEqual(4);
    for (const { doc } of compiled.versions) {
      const diagram = diagramOf(doc);
      const ids = new Map<string, string>();
      for (const m of diagram.matchAll(/^ {2}(s\d+)\W+"([A-Za-z][\w-]*)<br\/>/gm)) ids.set(m[2]!, m[1]!);
      expect([...ids.keys()].sort(), doc.logicId).toEqual(Object.keys(doc.steps).sort());
      expect(diagram, doc.logicId).toContain(`start --> ${ids.get(doc.start)}`);
      const edges = new Set([...diagram.matchAll(/^ {2}(s\d+) -\.?->(?:\|[^\n]*\|)? (s\d+|done)$/gm)].map((m) => `${m[1]}>${m[2]}`));
      for (const [name, step] of Object.entries(doc.steps)) {
        for (const r of routesOf(step)) expect(edges.has(`${ids.get(name)}>${ids.get(r.target)}`), `${doc.logicId}: ${name}.${r.field}`).toBe(true);
        if (step.kind !== 'fail' && step.kind !== 'choice' && !step.next) expect(edges.has(`${ids.get(name)}>done`), `${doc.logicId}: ${name} ends`).toBe(true);
      }
      const compensations = Object.values(doc.steps).filter((s) => s.compensate !== undefined).length;
      expect([...diagram.matchAll(/-\.-o\|compensate\|/g)].length, doc.logicId).toBe(compensations);
    }
  });
});
