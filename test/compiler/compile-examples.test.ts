import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { canonicalJson } from '../../contracts/canonical-json.ts';
import { parseLogicVersion } from '../../contracts/validate.ts';
import { type CompileResult, compile } from '../../compiler/index.ts';
import { EXAMPLES, REPO, readTree, scratchProject } from './project-helpers.ts';

const GOLDEN = join(REPO, 'test/fixtures/compiled');
const scratch = scratchProject({});
let first: CompileResult;

beforeAll(async () => {
  first = await compile({ root: EXAMPLES, out: join(scratch.dir, 'a'), lockPath: join(scratch.dir, 'flow.lock.json') });
});
afterAll(() => scratch.dispose());

describe('compiling the examples', () => {
  test('compiling twice gives byte-identical artifacts', async () => {
    await compile({ root: EXAMPLES, out: join(scratch.dir, 'b'), lockPath: join(scratch.dir, 'flow.lock.json') });
    const [a, b] = [readTree(join(scratch.dir, 'a')), readTree(join(scratch.dir, 'b'))];
    expect([...b.keys()]).toEqual([...a.keys()]);
    for (const [path, bytes] of a) expect(b.get(path)?.equals(bytes), path).toBe(true);
  });

  test('every emitted LogicVersion validates against the contracts, hash included, and is in the manifest', () => {
    const manifest = JSON.parse(readFileSync(join(scratch.dir, 'a/manifest.json'), 'utf8'));
    expect(manifest.logicVersions.map((v: { logicId: string }) => v.logicId)).toEqual([
      'payments.capture',
      'payments.capture',
      'provisioning.service',
      'provisioning.tenant',
      'statements.monthly',
    ]);
    for (const entry of manifest.logicVersions) {
      const doc = parseLogicVersion(JSON.parse(readFileSync(join(scratch.dir, 'a', entry.file), 'utf8')));
      expect(doc.hash).toBe(entry.hash);
      expect(existsSync(join(scratch.dir, 'a', entry.diagram))).toBe(true);
    }
  });

  test('artifacts are canonical JSON with portable source paths', () => {
    for (const v of first.versions) {
      const text = readFileSync(join(first.outDir, `${v.doc.logicId}@${v.doc.version}.json`), 'utf8');
      expect(text).toBe(canonicalJson(JSON.parse(text)));
      expect(text).not.toContain(REPO);
      expect(v.doc.source?.file).toMatch(/^[a-z-]+\.ts$/);
    }
  });

  test('the examples use the steps the demo service serves', () => {
    const byId = new Map(first.versions.map((v) => [v.doc.logicId, v.doc]));
    const payments = byId.get('payments.capture')!;
    expect(payments.domain).toBe('payments');
    expect(payments.steps['reserve']).toMatchObject({ kind: 'proxy', path: '/funds/reserve', compensate: { kind: 'proxy', path: '/funds/release' } });
    expect(payments.steps['capture']).toMatchObject({ kind: 'proxy', path: '/funds/capture', compensate: { path: '/funds/refund' } });
    expect(payments.steps['approval']).toMatchObject({ kind: 'decision', options: ['approve', 'reject'] });
    expect(payments.steps['needsApproval']).toMatchObject({ kind: 'choice', branches: [{ when: 'steps.score.needsApproval or (input.amount >= 10000)', next: 'approval' }] });
    expect(payments.steps['notify']).toMatchObject({ kind: 'proxy', path: '/notify' });
    const tenant = byId.get('provisioning.tenant')!;
    expect(tenant.steps['services']).toMatchObject({ kind: 'children', logicId: 'provisioning.service', items: 'input.services' });
    expect(Object.values(tenant.steps).some((s) => s.kind === 'delay')).toBe(true);
    expect(byId.get('statements.monthly')!.triggers).toEqual([
      {
        event: 'account.opened',
        input: '{"accountId": event.payload.accountId, "currency": event.payload.currency, "channel": event.payload.channel}',
      },
    ]);
  });

  test('the compiled examples match the golden files (UPDATE_GOLDEN=1 rewrites them)', () => {
    const produced = readTree(join(scratch.dir, 'a'));
    if (process.env['UPDATE_GOLDEN'] === '1') {
      rmSync(GOLDEN, { recursive: true, force: true });
      for (const [path, bytes] of produced) {
        mkdirSync(join(GOLDEN, path, '..'), { recursive: true });
        writeFileSync(join(GOLDEN, path), bytes);
      }
    }
    const golden = readTree(GOLDEN);
    expect([...produced.keys()]).toEqual([...golden.keys()]);
    for (const [path, bytes] of golden) expect(produced.get(path)?.toString(), path).toBe(bytes.toString());
  });
});
