import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { REPO } from './project-helpers.ts';

const diagram = readFileSync(join(REPO, 'test/fixtures/compiled/payments.capture@1.mmd'), 'utf8');

describe('the Mermaid diagram of a version', () => {
  test('is a top-down flowchart naming the version and its hash', () => {
    expect(diagram.split('\n').slice(0, 2)).toEqual(['flowchart TD', expect.stringMatching(/^ {2}%% payments\.capture@1 sha256:[0-9a-f]{64}$/)]);
  });

  test('shows steps by kind, routes with their conditions, error routes and compensations', () => {
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
});
