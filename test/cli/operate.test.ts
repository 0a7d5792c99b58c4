import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { main } from '../../cli/main.ts';
import { mintToken } from '../../cli/dev-token.ts';
import { type Api, buildApi } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { type Db, openDb } from '../../engine/store/db.ts';
import { migrate } from '../../engine/store/migrate.ts';
import { FakeService } from '../support/fake-service.ts';
import { logic } from '../ui/harness.ts';

/** `s8flow ls / show / retry / bulk …` against a real engine's HTTP API, with their exit codes. */

const SECRET = 'cli-test-secret-for-hs256-tokens-0123456789';
const flaky = logic({
  logicId: 'cli.flaky',
  start: 'charge',
  steps: { charge: { kind: 'proxy', handler: 'TEST', method: 'POST', path: '/charge', retry: { maxAttempts: 1 } } },
} as never);

describe('s8flow operator commands over the API', () => {
  let db: Db;
  let engine: Engine;
  let api: Api;
  let svc: FakeService;
  let url: string;
  let admin: string;
  let reader: string;
  let up = false;

  async function run(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
    let out = '';
    let err = '';
    const o = vi.spyOn(process.stdout, 'write').mockImplementation((s) => {
      out += String(s);
      return true;
    });
    const e = vi.spyOn(process.stderr, 'write').mockImplementation((s) => {
      err += String(s);
      return true;
    });
    try {
      return { code: await main(argv), out, err };
    } finally {
      o.mockRestore();
      e.mockRestore();
    }
  }
  const target = (token: string) => ['--url', url, '--token', token];

  beforeAll(async () => {
    svc = await new FakeService().on('/charge', () => (up ? { status: 200, body: { ok: true } } : { status: 503 })).listen();
    db = await openDb();
    await migrate(db);
    engine = new Engine({ db, executors: { handlers: new Map([['TEST', { url: svc.url }]]) }, worker: { concurrency: 2, pollMs: 50 } });
    await engine.publishVersion(engine.env, flaky);
    await engine.workers.start();
    api = await buildApi({ engine, auth: { secret: SECRET, production: false } });
    url = await api.app.listen({ host: '127.0.0.1', port: 0 });
    admin = await mintToken(SECRET, { sub: 'ops@example.com', envs: ['*'], scope: 'flow:admin' });
    reader = await mintToken(SECRET, { sub: 'viewer@example.com', envs: ['*'], scope: 'flow:read' });
  });
  afterAll(async () => {
    await api?.close();
    await engine?.close();
    await db?.close();
    await svc?.close();
  });

  it('lists, previews and retries a dead-lettered instance; tables by default, JSON with --json', async () => {
    const { id } = await engine.start({ logicId: 'cli.flaky', input: {} });
    expect((await engine.settled(id)).state).toBe('dead_lettered');

    const ls = await run('ls', '--state', 'dead_lettered', ...target(admin));
    expect(ls.code).toBe(0);
    expect(ls.out.split('\n')[0]).toMatch(/^id\s+logicId\s+version\s+state/);
    expect(ls.out).toContain(id);
    const listed = JSON.parse((await run('ls', '--state', 'dead_lettered', '--json', ...target(admin))).out);
    expect(listed.items.map((i: { id: string }) => i.id)).toContain(id);
    // a time range on created_at
    const later = new Date(Date.now() + 60_000).toISOString();
    const ids = async (...f: string[]) => JSON.parse((await run('ls', ...f, '--json', ...target(admin))).out).items.map((i: { id: string }) => i.id);
    await expect(ids('--from', later)).resolves.not.toContain(id);
    await expect(ids('--to', later)).resolves.toContain(id);

    const preview = await run('retry', id, '--dry-run', ...target(admin));
    expect(preview.code).toBe(0);
    expect(preview.out).toContain('dry run of retry: nothing was changed');
    expect((await engine.get(id)).state).toBe('dead_lettered');

    up = true;
    const retried = await run('retry', id, '--reason', 'network back', ...target(admin));
    expect(retried.code).toBe(0);
    expect((await engine.settled(id)).state).toBe('completed');
    const history = await run('history', id, ...target(admin));
    expect(history.out).toMatch(/audit retry\s.*by ops@example\.com/);
    // the verb comes before the attempt it caused (committed in the same transaction, at the same time)
    const lines = history.out.split('\n');
    const verb = lines.findIndex((l) => /audit retry/.test(l));
    const rerun = lines.findIndex((l) => /\scharge\s+2\s/.test(l));
    expect(rerun).toBeGreaterThan(0);
    expect(verb).toBeLessThan(rerun);
  });

  it('ls --stuck prints why each instance is stuck; ls --parent lists the children of one instance', async () => {
    const { id } = await engine.start({ logicId: 'cli.flaky', input: {}, idempotencyKey: 'stuck-one' });
    await engine.settled(id);
    // the instance moved back in time and pending: runnable for longer than a minute, with no worker to take it
    await engine.workers.stop();
    await db.pool.query(`UPDATE workflows SET state = 'pending', run_at = now() - interval '10 minutes' WHERE id = $1`, [id]);
    const ls = await run('ls', '--stuck', ...target(admin));
    expect(ls.code).toBe(0);
    expect(ls.out.split('\n')[0]).toMatch(/\breason\b/);
    expect(ls.out.split('\n').find((l) => l.includes(id))).toMatch(/pending_too_long/);
    await db.pool.query(`UPDATE workflows SET state = 'completed', run_at = now() WHERE id = $1`, [id]);
    await engine.workers.start();

    const child = await engine.start({ logicId: 'cli.flaky', input: {}, idempotencyKey: 'a-child' });
    await engine.settled(child.id);
    await db.pool.query('UPDATE workflows SET parent_id = $1 WHERE id = $2', [id, child.id]);
    const children = JSON.parse((await run('ls', '--parent', id, '--json', ...target(admin))).out);
    expect(children.items.map((i: { id: string }) => i.id)).toEqual([child.id]);
  });

  it('exits 2 without a target, 3 for an unknown id, 4 for a verb that does not apply, 5 for a missing scope', async () => {
    expect((await run('ls')).code).toBe(2);
    expect((await run('show', '00000000-0000-4000-8000-000000000000', ...target(admin))).code).toBe(3);
    up = true;
    const { id } = await engine.start({ logicId: 'cli.flaky', input: {} });
    expect((await engine.settled(id)).state).toBe('completed');
    const refused = await run('retry', id, '--reason', 'again', ...target(admin));
    expect(refused.code).toBe(4);
    expect(refused.err).toContain('FLOW_VERB_NOT_ALLOWED');
    const forbidden = await run('cancel', id, '--reason', 'x', ...target(reader));
    expect(forbidden.code).toBe(5);
    expect((await run('ls', '--url', 'http://127.0.0.1:1', '--token', admin)).code).toBe(7);
  });

  it('runs a bulk retry as a job, prints a result per instance, and exits 6 when some failed', async () => {
    up = false;
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await engine.start({ logicId: 'cli.flaky', input: { i } })).id);
    for (const id of ids) expect((await engine.settled(id)).state).toBe('dead_lettered');
    const dry = await run('bulk', 'retry', '--state', 'dead_lettered', '--logic-id', 'cli.flaky', '--dry-run', ...target(admin));
    expect(dry.out).toMatch(/^\d+ instance\(s\) would get retry/);

    // each retried instance runs straight into the 503 again: retried ok, then dead-lettered anew
    const job = await run('bulk', 'retry', '--state', 'dead_lettered', '--logic-id', 'cli.flaky', '--reason', 'try again', '--json', ...target(admin));
    expect(job.code).toBe(0);
    const body = JSON.parse(job.out);
    expect(body.state).toBe('done');
    expect(body.items.filter((i: { status: string }) => i.status === 'ok').length).toBe(body.total);
    expect(job.err).toContain('bulk retry [');

    // a second job over the same filter while the first one's instances are not dead-lettered any
    // more fails per item with the verb's refusal, and the command exits 6
    for (const id of ids) await engine.settled(id);
    up = true;
    const { id: done } = await engine.start({ logicId: 'cli.flaky', input: {} });
    await engine.settled(done);
    const mixed = await run('bulk', 'cancel', '--logic-id', 'cli.flaky', '--reason', 'clean up', ...target(admin));
    expect(mixed.code).toBe(6);
    expect(mixed.out).toContain('FLOW_VERB_NOT_ALLOWED');
  });
});
