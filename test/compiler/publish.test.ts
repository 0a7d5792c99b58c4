import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { canonicalJson } from '../../contracts/canonical-json.ts';
import { compile, PublishError, PublishErrorCode, publish } from '../../compiler/index.ts';
import { EXAMPLES, readTree, scratchProject } from './project-helpers.ts';

const scratch = scratchProject({});
const from = join(scratch.dir, 'dist');
beforeAll(async () => {
  await compile({ root: EXAMPLES, out: from, lockPath: join(scratch.dir, 'flow.lock.json') });
});
afterAll(() => scratch.dispose());

async function publishCode(run: Promise<unknown>): Promise<string> {
  try {
    await run;
  } catch (err) {
    if (err instanceof PublishError) return err.code;
    throw err;
  }
  return 'none';
}

describe('s8flow publish to a directory', () => {
  test('copies every LogicVersion, diagram and the manifest', async () => {
    const to = join(scratch.dir, 'engine-a');
    const result = await publish({ from, to });
    expect(result.published).toEqual(['payments.capture@2', 'payments.capture@3', 'provisioning.service@1', 'provisioning.tenant@1', 'statements.monthly@2']);
    const [src, dst] = [readTree(from), readTree(to)];
    for (const [path, bytes] of src) expect(dst.get(path)?.equals(bytes), path).toBe(true);
  });

  test('publishing again is idempotent by hash', async () => {
    const to = join(scratch.dir, 'engine-b');
    await publish({ from, to });
    const again = await publish({ from, to });
    expect(again.published).toEqual([]);
    expect(again.unchanged).toHaveLength(5);
  });

  test('the same logicId@version with another hash is refused and nothing is copied', async () => {
    const to = join(scratch.dir, 'engine-c');
    await publish({ from, to });
    const path = join(to, 'payments.capture@2.json');
    const doc = JSON.parse(readFileSync(path, 'utf8'));
    writeFileSync(path, canonicalJson({ ...doc, hash: `sha256:${'0'.repeat(64)}` }));
    expect(await publishCode(publish({ from, to }))).toBe(PublishErrorCode.versionConflict);
  });

  test('a conflict leaves the target untouched', async () => {
    const to = join(scratch.dir, 'engine-d');
    await publish({ from, to });
    const path = join(to, 'statements.monthly@2.json');
    writeFileSync(path, canonicalJson({ hash: 'sha256:other' }));
    const manifestBefore = readFileSync(join(to, 'manifest.json'), 'utf8');
    expect(await publishCode(publish({ from, to }))).toBe(PublishErrorCode.versionConflict);
    expect(readFileSync(join(to, 'manifest.json'), 'utf8')).toBe(manifestBefore);
  });

  test('an HTTP target is refused with its own code, for now', async () => {
    expect(await publishCode(publish({ from, to: 'https://engine.example/artifacts' }))).toBe(PublishErrorCode.targetUnsupported);
  });

  test('a source without a manifest is refused', async () => {
    expect(await publishCode(publish({ from: join(scratch.dir, 'nothing'), to: join(scratch.dir, 'x') }))).toBe(PublishErrorCode.sourceInvalid);
    expect(existsSync(join(scratch.dir, 'x'))).toBe(false);
  });
});
