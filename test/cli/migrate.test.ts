import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintToken } from '../../cli/dev-token.ts';
import { EXIT } from '../../cli/http.ts';
import { runCli } from '../support/cli.ts';
import { type Api, buildApi } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { type Db, openDb } from '../../engine/store/db.ts';
import { migrate } from '../../engine/store/migrate.ts';
import { makeLogic } from '../contracts/helpers.ts';

/** `s8flow migrate` against a real engine's HTTP API: a dry run by default, `--apply` runs the job, with its exit codes. */

const SECRET = 'cli-test-secret-for-hs256-tokens-0123456789';
const v = (version: number, steps: Parameters<typeof makeLogic>[0]['steps']) => makeLogic({ logicId: 'cli.pay', version, start: 'approval', steps });
const v1 = v(1, { approval: { kind: 'decision', options: ['ok'], next: 'done' }, done: { kind: 'pass' } });
const v2 = v(2, { approval: { kind: 'decision', options: ['ok'], next: 'fraud' }, fraud: { kind: 'pass', next: 'done' }, done: { kind: 'pass' } });
const v3 = v(3, { approval: { kind: 'decision', options: ['ok'], next: 'done' }, done: { kind: 'pass' } });

describe('s8flow migrate over the API', () => {
  let db: Db;
  let engine: Engine;
  let api: Api;
  let url: string;
  let admin: string;
  let reader: string;

  const run = (...argv: string[]) => runCli(argv);
  const target = (token: string) => ['--url', url, '--token', token];

  beforeAll(async () => {
    db = await openDb();
    await migrate(db);
    engine = new Engine({ db });
    for (const doc of [v1, v2, v3]) await engine.publishVersion(engine.env, doc);
    await engine.setVersionActive(engine.env, 'cli.pay', 3, false);
    api = await buildApi({ engine, auth: { secret: SECRET, production: false } });
    url = await api.app.listen({ host: '127.0.0.1', port: 0 });
    admin = await mintToken(SECRET, { sub: 'ops@example.com', envs: ['*'], scope: 'flow:migrate:cli.* flow:read' });
    reader = await mintToken(SECRET, { sub: 'viewer@example.com', envs: ['*'], scope: 'flow:read' });
  });
  afterAll(async () => {
    await api?.close();
    await engine?.close();
    await db?.close();
  });

  it('previews by default, moves with --apply and a reason, and exits 6 when an instance is refused', async () => {
    const { id } = await engine.start({ logicId: 'cli.pay', version: 1, input: {} });
    await engine.workers.drain();
    expect((await engine.get(id)).state).toBe('waiting');

    const dry = await run('migrate', 'cli.pay', '--from', '1', '--to', '2', '--ids', id, ...target(admin));
    expect(dry.code).toBe(0);
    expect(dry.out).toContain('cli.pay@1 → @2: 1 selected, 1 would move, 0 refused (dry run; --apply moves them)');
    expect(dry.out).toContain(`${id}  waiting at approval → @2 approval; keeps approval attempt 1 [${id}:approval:0]; next (if decision approval = ok): no call; stops completed at done`);
    expect(dry.out).toContain('by shape, 1 group:\n  1 × waiting at approval → @2 approval; next (if decision approval = ok): no call; stops completed at done');
    expect((await engine.get(id)).version).toBe(1);

    // the instances page by page, the cursor printed while more follow
    const { id: second } = await engine.start({ logicId: 'cli.pay', version: 1, input: {} });
    await engine.workers.drain();
    const paged = await run('migrate', 'cli.pay', '--from', '1', '--to', '2', '--ids', `${id},${second}`, '--page-size', '1', ...target(admin));
    expect(paged.out).toContain('2 selected, 2 would move');
    expect(paged.out).toContain(`1 group:\n  2 × waiting at approval`);
    expect(paged.out).toContain(`${id}  waiting at approval`);
    expect(paged.out).not.toContain(`${second}  waiting`);
    expect(paged.out).toContain(`more: --after ${id}`);
    const next = await run('migrate', 'cli.pay', '--from', '1', '--to', '2', '--ids', `${id},${second}`, '--page-size', '1', '--after', id, ...target(admin));
    expect(next.out).toContain(`instances after ${id}:\n${second}  waiting at approval → @2 approval; keeps approval attempt 1 [${second}:approval:0]`);
    expect(next.out).not.toContain('more: --after');
    expect((await run('migrate', 'cli.pay', '--from', '1', '--to', '2', '--page-size', 'x', ...target(admin))).code).toBe(2);
    // a retired target only when asked for
    const retired = await run('migrate', 'cli.pay', '--from', '1', '--to', '3', '--ids', id, ...target(admin));
    expect([retired.code, retired.err]).toEqual([EXIT.conflict, expect.stringContaining('FLOW_MIGRATE_TARGET_RETIRED')]);
    const allowed = await run('migrate', 'cli.pay', '--from', '1', '--to', '3', '--ids', id, '--allow-retired', ...target(admin));
    expect([allowed.code, allowed.out]).toEqual([0, expect.stringContaining('1 selected, 1 would move')]);

    expect((await run('migrate', 'cli.pay', '--from', '1', '--to', '2', '--ids', id, '--apply', ...target(admin))).code).toBe(2);
    const applied = await run('migrate', 'cli.pay', '--from', '1', '--to', '2', '--ids', id, '--apply', '--reason', 'fraud check', ...target(admin));
    expect(applied.code).toBe(0);
    expect(applied.out).toMatch(/moved, 0 refused of 1/);
    expect((await engine.get(id)).version).toBe(2);

    const again = await run('migrate', 'cli.pay', '--from', '1', '--to', '2', '--ids', id, '--apply', '--reason', 'twice', ...target(admin));
    expect(again.code).toBe(6);
    expect(again.out).toContain('FLOW_MIGRATE_WRONG_VERSION');
    const refusedDry = await run('migrate', 'cli.pay', '--from', '1', '--to', '2', '--ids', id, ...target(admin));
    expect(refusedDry.out).toContain(`${id}  waiting at approval: REFUSED FLOW_MIGRATE_WRONG_VERSION`);

    const denied = await run('migrate', 'cli.pay', '--from', '1', '--to', '2', ...target(reader));
    expect([denied.code, denied.err]).toEqual([5, expect.stringContaining('FLOW_SCOPE_MISSING')]);
    const bad = await run('migrate', 'cli.pay', '--from', '2', '--to', '1', ...target(admin));
    expect([bad.code, bad.err]).toEqual([1, expect.stringContaining('FLOW_MIGRATE_BAD_TARGET')]);
  });
});
