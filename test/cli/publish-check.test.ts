import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { runCli } from '../support/cli.ts';
import { mintToken } from '../../cli/dev-token.ts';
import type { LogicVersion } from '../../contracts/index.ts';
import { type Api, buildApi } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { describeEachDriver } from '../support/db.ts';

/** `s8flow publish --check [--fail-on unsafe]` against a running engine's API, with its exit codes. */

const SECRET = 'cli-test-secret-for-hs256-tokens-0123456789';
const ENV = 'cli-env';
const v1 = makeLogic({
  logicId: 'cli.ship',
  version: 1,
  start: 'approve',
  steps: { approve: { kind: 'decision', options: ['ok'], next: 'ship' }, ship: { kind: 'pass' } },
});
const safe = makeLogic({
  logicId: 'cli.ship',
  version: 2,
  start: 'approve',
  steps: { approve: { kind: 'decision', options: ['ok'], next: 'ship' }, ship: { kind: 'pass', next: 'audit' }, audit: { kind: 'pass' } },
});
// the step every live instance waits at is gone
const unsafe = makeLogic({ logicId: 'cli.ship', version: 2, start: 'ship', steps: { ship: { kind: 'pass' } } });

describeEachDriver('s8flow publish --check', (getDb) => {
  let engine: Engine;
  let api: Api;
  let url: string;
  let publisher: string;
  const dirs: string[] = [];
  let done = '';

  beforeAll(async () => {
    engine = new Engine({ db: getDb(), env: ENV, executors: { handlers: new Map() } });
    await engine.publish(v1);
    // each parks at approve at once: no worker needed
    for (let i = 0; i < 4; i++) await engine.start({ logicId: 'cli.ship', input: {} });
    // and one approved: it runs to its end
    done = (await engine.start({ logicId: 'cli.ship', input: {} })).id;
    await engine.resume(done, { step: 'approve', option: 'ok', approver: { subject: 'ops@example.com', scopes: ['flow:admin'] } });
    api = await buildApi({ engine, auth: { secret: SECRET, production: false } });
    url = await api.app.listen({ host: '127.0.0.1', port: 0 });
    publisher = await mintToken(SECRET, { sub: 'ci@example.com', envs: [ENV], scope: 'flow:publish:cli.*' });
  });
  afterAll(async () => {
    await api?.close();
    await engine?.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  function artifacts(...docs: LogicVersion[]): string {
    const dir = mkdtempSync(join(tmpdir(), 's8flow-check-'));
    dirs.push(dir);
    for (const doc of docs) writeFileSync(join(dir, `${doc.logicId}@${doc.version}.json`), JSON.stringify(doc));
    return dir;
  }

  const run = (...argv: string[]) => runCli(argv);
  const check = (dir: string, ...more: string[]) => run('publish', '--to', url, '--token', publisher, '--env', ENV, '--from', dir, '--check', ...more);

  it('prints a readable report and publishes nothing; exits 0 on a safe candidate even with --fail-on unsafe', async () => {
    const r = await check(artifacts(v1, safe), '--fail-on', 'unsafe');
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out).toContain('cli.ship@1: nothing to check (no active version below it)');
    expect(r.out).toContain('cli.ship@2 against cli.ship@1: SAFE — 4 live instances, 0 in unsafe groups');
    expect(r.out).toMatch(/safe\s+4 × waiting at approve \(generation 0\)/);
    expect(r.out).toContain('next (if decision approve = ok): ship → audit; stops completed at audit');
    expect((await engine.listVersions(ENV)).map((v) => v.version)).toEqual([1]);
  });

  it('exits 1 on an unsafe candidate with --fail-on unsafe, and 0 without it', async () => {
    const dir = artifacts(unsafe);
    const failing = await check(dir, '--fail-on', 'unsafe');
    expect(failing.code).toBe(1);
    expect(failing.out).toContain('cli.ship@2 against cli.ship@1: UNSAFE — 4 live instances, 4 in unsafe groups');
    expect(failing.out).toContain('FLOW_COMPAT_STEP_MISSING: step approve, where these instances are, is not in cli.ship@2');
    expect((await check(dir)).code).toBe(0);
  });

  it('with --replay K, replays the last ended instances on each candidate and prints where they diverge, without failing', async () => {
    expect((await engine.get(done)).state).toBe('completed');
    const r = await check(artifacts(safe), '--fail-on', 'unsafe', '--replay', '3');
    expect(r.code).toBe(0);
    expect(r.out).toContain('replayed 1 ended instance of cli.ship@1: 0 decided the same, 1 diverged');
    // the approval's resume now runs audit too: a third attempt the recorded run never made
    expect(r.out).toContain(`${done}: at event 1 [resume] (step approve, attempt 1) on attempts[2]`);
  });

  it('refuses --fail-on without --check, another --fail-on value, and --check to a directory, as usage errors', async () => {
    const dir = artifacts(safe);
    expect((await run('publish', '--to', url, '--token', publisher, '--from', dir, '--fail-on', 'unsafe')).code).toBe(2);
    expect((await check(dir, '--fail-on', 'warnings')).code).toBe(2);
    expect((await run('publish', '--to', dir, '--from', dir, '--check')).code).toBe(2);
    expect((await check(dir, '--replay', '101')).code).toBe(2);
    expect((await run('publish', '--to', url, '--token', publisher, '--from', dir, '--replay', '3')).code).toBe(2);
  });
});
