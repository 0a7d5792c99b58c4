import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { LOGIC_VERSION_SCHEMA, type LogicVersion, type StepDef } from '../../contracts/logic-version.ts';
import { logicVersionHash } from '../../contracts/canonical-json.ts';
import { classifyChange, compile, shapeOf } from '../../compiler/index.ts';
import { CompileErrorCode } from '../../compiler/errors.ts';
import { diagnosticsOf, flowSource, scratchProject } from './project-helpers.ts';

const INPUT = { type: 'object', properties: { amount: { type: 'number', maximum: 100 }, note: { type: 'string' } }, required: ['amount'] };

function doc(steps: Record<string, Partial<StepDef>>, extra: Partial<LogicVersion> = {}): LogicVersion {
  const d = {
    schema: LOGIC_VERSION_SCHEMA,
    logicId: 'gate.flow',
    version: 1,
    domain: 'gate',
    input: INPUT,
    start: Object.keys(steps)[0]!,
    steps: Object.fromEntries(Object.entries(steps).map(([k, v]) => [k, { kind: 'proxy', path: `/${k}`, ...v }])),
    ...extra,
    hash: '',
  } as LogicVersion;
  d.hash = logicVersionHash(d as unknown as Record<string, unknown>);
  return d;
}

const BASE = doc({ reserve: { next: 'capture' }, capture: { next: 'notify' }, notify: {} });
const classify = (after: LogicVersion) => classifyChange(shapeOf(BASE), shapeOf(after));

describe('the version gate classifies a change', () => {
  test('an optional step inserted between two steps is safe', () => {
    const c = classify(doc({ reserve: { next: 'audit' }, audit: { next: 'capture' }, capture: { next: 'notify' }, notify: {} }));
    expect(c.kind).toBe('safe');
    expect(c.reasons.map((r) => r.text)).toEqual(['optional step "audit" added at step "reserve" next, before "capture"']);
  });

  test('a step added after the end is a safe terminal path', () => {
    const c = classify(doc({ reserve: { next: 'capture' }, capture: { next: 'notify' }, notify: { next: 'archive' }, archive: {} }));
    expect(c).toMatchObject({ kind: 'safe', reasons: [{ breaking: false, text: expect.stringContaining('terminal path added') }] });
  });

  test('a new error route to new steps is a safe terminal path', () => {
    const c = classify(doc({ reserve: { next: 'capture' }, capture: { next: 'notify', onError: 'oops' }, notify: {}, oops: { kind: 'fail', code: 'X' } as Partial<StepDef> }));
    expect(c.kind).toBe('safe');
    expect(c.reasons[0]?.text).toMatch(/terminal path added at step "capture" onError: oops/);
  });

  test('a removed step is breaking', () => {
    const c = classify(doc({ reserve: { next: 'notify' }, notify: {} }));
    expect(c.kind).toBe('breaking');
    expect(c.reasons.map((r) => r.text)).toContain('step "capture" removed');
  });

  test('a renamed step is breaking and named as a rename', () => {
    const c = classify(doc({ reserve: { next: 'capture2' }, capture2: { path: '/capture', next: 'notify' }, notify: {} }));
    expect(c.kind).toBe('breaking');
    expect(c.reasons.map((r) => r.text)).toContain('step "capture" renamed to "capture2"');
  });

  test('reordered steps are breaking and named as a reorder', () => {
    const c = classify(doc({ reserve: { next: 'notify' }, notify: { next: 'capture' }, capture: {} }));
    expect(c.kind).toBe('breaking');
    expect(c.reasons.map((r) => r.text)).toContain('steps reordered: "notify" now runs before "capture"');
  });

  test('a narrowed input schema is breaking, and says how', () => {
    const narrowed = { ...INPUT, properties: { ...INPUT.properties, amount: { type: 'number', maximum: 50 } }, required: ['amount', 'note'] };
    const c = classify(doc({ reserve: { next: 'capture' }, capture: { next: 'notify' }, notify: {} }, { input: narrowed }));
    expect(c.kind).toBe('breaking');
    expect(c.reasons.map((r) => r.text)).toEqual([
      'input schema narrowed: input.amount: maximum is now 50 (was 100)',
      'input schema narrowed: input: field "note" is now required',
    ]);
  });

  test('an optional input field added widens the schema: safe', () => {
    const widened = { ...INPUT, properties: { ...INPUT.properties, extra: { type: 'boolean' } } };
    const c = classify(doc({ reserve: { next: 'capture' }, capture: { next: 'notify' }, notify: {} }, { input: widened }));
    expect(c).toMatchObject({ kind: 'safe', reasons: [{ text: 'input schema widened: input: optional field "extra" added' }] });
  });

  test("a change to an existing step's configuration is breaking", () => {
    const c = classify(doc({ reserve: { next: 'capture', path: '/reserve/v2' }, capture: { next: 'notify' }, notify: {} }));
    expect(c.kind).toBe('breaking');
    expect(c.reasons[0]?.text).toMatch(/step "reserve" changed its configuration/);
  });

  test('a new route into an existing step is breaking', () => {
    const c = classify(doc({ reserve: { next: 'capture', onError: 'notify' }, capture: { next: 'notify' }, notify: {} }));
    expect(c.kind).toBe('breaking');
    expect(c.reasons[0]?.text).toMatch(/now routes into existing step "notify"/);
  });
});

describe('the version gate in compile', () => {
  const v1 = flowSource(
    "export const flow = workflow({ logicId: 'gate.e2e', version: 1, domain: 'gate', input: z.object({ n: z.number() }) })\n" +
      "  .proxy('a', { path: '/a' })\n  .proxy('b', { path: '/b' });",
  );
  const project = scratchProject({ 'flow.ts': v1 });
  const lockPath = join(project.dir, 'flow.lock.json');
  afterAll(() => project.dispose());

  test('--update-lock records the versions; an unchanged definition then passes', async () => {
    const first = await compile({ root: project.dir, updateLock: true, write: false });
    expect(first.lockUpdated).toBe(true);
    const lock = JSON.parse(readFileSync(lockPath, 'utf8'));
    expect(Object.keys(lock.versions)).toEqual(['gate.e2e@1']);
    expect(lock.versions['gate.e2e@1'].hash).toBe(first.versions[0]?.doc.hash);
    const again = await compile({ root: project.dir, write: false });
    expect(again.unlocked).toEqual([]);
  });

  test('a safe change under a locked version fails with SAFE, the diff and what to do', async () => {
    project.write('flow.ts', v1.replace("  .proxy('b', { path: '/b' });", "  .proxy('b', { path: '/b' })\n  .proxy('c', { path: '/c' });"));
    const [d] = await diagnosticsOf(compile({ root: project.dir, write: false }));
    expect(d?.code).toBe(CompileErrorCode.versionChangedSafe);
    expect(d?.message).toMatch(/gate\.e2e@1 changed but is locked in flow\.lock\.json/);
    expect(d?.message).toMatch(/safe: terminal path added at step "b" next: c/);
    expect(d?.hint).toMatch(/bump to version 2/);
  });

  test('a breaking change fails with BREAKING and says why', async () => {
    project.write('flow.ts', v1.replace("  .proxy('a', { path: '/a' })\n", ''));
    const [d] = await diagnosticsOf(compile({ root: project.dir, write: false }));
    expect(d?.code).toBe(CompileErrorCode.versionChangedBreaking);
    expect(d?.message).toMatch(/breaking: step "a" removed/);
  });

  test('after a version bump the new version compiles and --update-lock adds it', async () => {
    project.write('flow.ts', v1.replace('version: 1', 'version: 2').replace("  .proxy('a', { path: '/a' })\n", ''));
    const result = await compile({ root: project.dir, updateLock: true, write: false });
    expect(result.lockUpdated).toBe(true);
    expect(Object.keys(JSON.parse(readFileSync(lockPath, 'utf8')).versions)).toEqual(['gate.e2e@1', 'gate.e2e@2']);
  });
});
