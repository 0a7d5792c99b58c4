import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../support/cli.ts';
import { mintToken } from '../../cli/dev-token.ts';
import { type Api, buildApi } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { type Db, openDb } from '../../engine/store/db.ts';
import { migrate } from '../../engine/store/migrate.ts';
import { asScheduler } from '../../engine/store/tx.ts';
import { FakeService } from '../support/fake-service.ts';
import { logic } from '../ui/harness.ts';

/** `s8flow ls / show / retry / bulk …` against a real engine's HTTP API, with their exit codes. */

const SECRET = 'cli-test-secret-for-hs256-tokens-0123456789';
const flaky = logic({
  logicId: 'cli.flaky',
  start: 'charge',
  steps: { charge: { kind: 'proxy', handler: 'TEST', method: 'POST', path: '/charge', retry: { maxAttempts: 1 } } },
} as never);

const hello = logic({
  logicId: 'cli.hello',
  start: 'greet',
  input: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] },
  triggers: [{ event: 'cli.said', input: '{ "n": event.payload.n }' }],
  steps: { greet: { kind: 'pass', input: '{ "greeting": "hello " & $string(input.n) }' } },
} as never);
const ask = logic({
  logicId: 'cli.ask',
  start: 'approval',
  steps: {
    approval: { kind: 'decision', options: ['yes', 'no'], schema: { type: 'object', properties: { note: { type: 'string' } } } },
  },
} as never);
const held = logic({
  logicId: 'cli.held',
  start: 'hold',
  steps: {
    hold: { kind: 'proxy', handler: 'TEST', path: '/hold', compensate: { kind: 'proxy', handler: 'TEST', path: '/unhold' }, next: 'charge' },
    charge: { kind: 'proxy', handler: 'TEST', method: 'POST', path: '/charge', retry: { maxAttempts: 1 } },
  },
} as never);
const acct = logic({
  logicId: 'cli.acct',
  start: 'note',
  attributes: { accountId: { value: 'input.accountId' }, amount: { value: 'input.amount' } },
  steps: { note: { kind: 'pass' } },
} as never);
const shipping = logic({
  logicId: 'cli.ship',
  start: 'confirm',
  steps: { confirm: { kind: 'decision', options: ['ok'], next: 'ship' }, ship: { kind: 'proxy', handler: 'TEST', path: '/ship' } },
} as never);
const settles = logic({
  logicId: 'cli.settles',
  start: 'settled',
  triggers: [{ event: 'cli.settled', message: 'funds.settled', match: { correlationId: 'event.payload.ref' } }],
  steps: { settled: { kind: 'waitFor', message: 'funds.settled' } },
} as never);
const BIN = new URL('../../bin/s8flow.mjs', import.meta.url).pathname;

describe('s8flow operator commands over the API', () => {
  let db: Db;
  let engine: Engine;
  let api: Api;
  let svc: FakeService;
  let url: string;
  let admin: string;
  let reader: string;
  let up = false;

  const run = (...argv: string[]) => runCli(argv);
  const target = (token: string) => ['--url', url, '--token', token];

  beforeAll(async () => {
    svc = await new FakeService()
      .on('/charge', () => (up ? { status: 200, body: { ok: true } } : { status: 503 }))
      .on('/hold', () => ({ status: 200, body: { held: true } }))
      .on('/unhold', () => ({ status: 200, body: { unheld: true } }))
      .listen();
    db = await openDb();
    await migrate(db);
    engine = new Engine({ db, executors: { handlers: new Map([['TEST', { url: svc.url }]]) }, worker: { concurrency: 2, pollMs: 50 } });
    for (const doc of [flaky, hello, ask, held, acct, settles]) await engine.publishVersion(engine.env, doc);
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

  it('ls and bulk filter by search attributes (--attr) and by SLA breach (--sla-breached)', async () => {
    const started: string[] = [];
    for (const [accountId, amount] of [['acct-1', 50], ['acct-2', 100], ['acct-2', 700]] as const) {
      const { id } = await engine.start({ logicId: 'cli.acct', input: { accountId, amount } });
      await engine.settled(id);
      started.push(id);
    }
    const ids = async (...f: string[]) => JSON.parse((await run('ls', '--logic-id', 'cli.acct', ...f, '--json', ...target(admin))).out).items.map((i: { id: string }) => i.id).sort();
    await expect(ids('--attr', 'accountId=acct-2')).resolves.toEqual([started[1], started[2]].sort());
    await expect(ids('--attr', 'accountId=acct-2', '--attr', 'amount.lt=500')).resolves.toEqual([started[1]]);
    await db.pool.query(`INSERT INTO sla_breaches (env_id, workflow_id, logic_id, step, within) SELECT env_id, id, logic_id, '', 'PT1S' FROM workflows WHERE id = $1`, [started[0]]);
    await expect(ids('--sla-breached')).resolves.toEqual([started[0]]);
    const preview = JSON.parse((await run('bulk', 'cancel', '--attr', 'accountId=acct-2', '--reason', 'r', '--dry-run', '--json', ...target(admin))).out);
    expect(preview.count).toBe(2);
    expect((await run('ls', '--attr', 'accountId', ...target(admin))).code).toBe(2);
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
  it('launches an instance, sends an event, lists versions, and retires and reactivates one', async () => {
    const launched = await run('launch', 'cli.hello', '--input', '{"n":1}', '--json', ...target(admin));
    expect(launched.code).toBe(0);
    const record = JSON.parse(launched.out);
    expect((await engine.settled(record.id)).output).toEqual({ greeting: 'hello 1' });
    const table = await run('launch', 'cli.hello', '--input', '{"n":2}', '--idempotency-key', 'k-2', ...target(admin));
    expect(table.out).toMatch(/^[0-9a-f-]{36} {2}cli\.hello@1 {2}\w+/);
    const urgent = JSON.parse((await run('launch', 'cli.hello', '--input', '{"n":6}', '--priority', '9', '--json', ...target(admin))).out);
    const stored = await asScheduler(engine.db, (c) => c.query('SELECT priority FROM workflows WHERE id = $1', [urgent.id]));
    expect(stored.rows).toEqual([{ priority: 9 }]);
    expect((await run('launch', 'cli.hello', '--input', '{"n":7}', '--priority', 'high', ...target(admin))).code).toBe(2);

    const sent = await run('send', 'cli.said', '--payload', '{"n":3}', '--key', 'evt-1', '--json', ...target(admin));
    expect(sent.code).toBe(0);
    const { ids, matched } = JSON.parse(sent.out);
    expect(matched).toBe(true);
    expect((await engine.settled(ids[0])).output).toEqual({ greeting: 'hello 3' });
    const nobody = await run('send', 'cli.nobody', '--key', 'evt-2', ...target(admin));
    expect(nobody.out).toContain('no trigger listens to cli.nobody');
    const waiting = await engine.start({ logicId: 'cli.settles', input: {}, correlationId: 'ref-1' });
    await engine.settled(waiting.id);
    const delivered = await run('send', 'cli.settled', '--payload', '{"ref":"ref-1"}', '--key', 'evt-3', ...target(admin));
    expect(delivered.out).toBe(`delivered: funds.settled → ${waiting.id}\n`);
    expect((await run('send', 'cli.settled', '--payload', '{"ref":"ref-1"}', '--key', 'evt-3', ...target(admin))).out).toBe(
      `already sent with this key; what it did then:\ndelivered: funds.settled → ${waiting.id}\n`,
    );

    const versions = await run('versions', ...target(admin));
    expect(versions.code).toBe(0);
    expect(versions.out.split('\n')[0]).toMatch(/^logicId\s+version\s+active/);
    expect(versions.out).toMatch(/cli\.hello\s+1\s+true/);

    expect((await run('retire', 'cli.hello', '1', ...target(admin))).code).toBe(0);
    expect((await run('versions', '--json', ...target(admin))).out).toMatch(/"logicId": "cli\.hello",[^}]*"active": false/);
    const refused = await run('launch', 'cli.hello', '--input', '{"n":4}', ...target(admin));
    expect(refused.err).toContain('FLOW_VERSION_RETIRED');
    expect(refused.code).not.toBe(0);
    expect((await run('reactivate', 'cli.hello', '1', ...target(admin))).code).toBe(0);
    expect((await run('launch', 'cli.hello', '--input', '{"n":5}', ...target(admin))).code).toBe(0);
    expect((await run('retire', 'cli.hello', 'one', ...target(admin))).code).toBe(2);
  });

  it('decides without --payload when the decision needs none', async () => {
    const { id } = await engine.start({ logicId: 'cli.ask', input: {} });
    expect((await engine.settled(id)).state).toBe('waiting');
    const decided = await run('decide', id, 'approval', '--option', 'yes', ...target(admin));
    expect(decided.err).toBe('');
    expect(decided.code).toBe(0);
    expect((await engine.get(id)).state).toBe('completed');
  });

  it('publish from a folder that is not there says so with a code, not a stack trace', async () => {
    const to = mkdtempSync(join(tmpdir(), 's8flow-publish-'));
    try {
      const missing = await run('publish', '--to', to, '--from', join(to, 'no-such-dir'));
      expect(missing.code).toBe(1);
      expect(missing.err).toMatch(/^s8flow publish: .*no-such-dir.*\[CLI_NO_ARTIFACTS\]\n$/);
      const overHttp = await run('publish', '--to', url, '--token', admin, '--from', join(to, 'no-such-dir'));
      expect(overHttp.err).toContain('[CLI_NO_ARTIFACTS]');
    } finally {
      rmSync(to, { recursive: true, force: true });
    }
  });

  it('exits quietly when the reader of its output goes away (s8flow show … | head)', { timeout: 120_000 }, async () => {
    const { id } = await engine.start({ logicId: 'cli.hello', input: { n: 6 } });
    await engine.settled(id);
    const child = spawn(process.execPath, [BIN, 'show', id, '--json', ...target(admin)], { stdio: ['ignore', 'pipe', 'pipe'] });
    // the reader closes before the command writes: its first write meets a closed pipe (EPIPE)
    child.stdout.destroy();
    let err = '';
    child.stderr.on('data', (b) => {
      err += String(b);
    });
    const code = await new Promise<number | null>((done) => child.on('close', done));
    expect(err).toBe('');
    expect(code).toBe(0);
  });
  it('repair --dry-run lists the effects that stay in place; --compensate-rewound undoes them before the re-run', async () => {
    up = false;
    const { id } = await engine.start({ logicId: 'cli.held', input: {} });
    expect((await engine.settled(id)).state).toBe('dead_lettered');
    const dry = await run('repair', id, '--step', 'hold', '--dry-run', ...target(admin));
    expect(dry.out).toContain('stay in place');
    expect(dry.out).toMatch(new RegExp(`hold\\s+0\\s+proxy TEST /unhold\\s+${id}:hold:0:compensate`));
    up = true;
    const from = svc.received.length;
    const repaired = await run('repair', id, '--step', 'hold', '--compensate-rewound', '--reason', 'hold twice', ...target(admin));
    expect(repaired.code).toBe(0);
    expect((await engine.settled(id)).state).toBe('completed');
    expect(svc.received.slice(from).map((c) => c.headers['idempotency-key'])).toEqual([`${id}:hold:0:compensate`, `${id}:hold:1`, `${id}:charge:1`]);
  });

  it('handlers prints where the live instances of each caller stand and whether the path may be turned off; a path nothing calls exits 3', async () => {
    await engine.publishVersion(engine.env, shipping);
    await engine.start({ logicId: 'cli.ship', input: {} });
    await engine.setVersionActive(engine.env, 'cli.ship', 1, false);
    const res = await run('handlers', '--handler', 'TEST', '--path', '/ship', ...target(reader));
    expect(res.code).toBe(0);
    expect(res.out).toContain('  POST /ship: no: 1 live instance of cli.ship@1 may still call it: 1 waiting at `confirm`, whose path reaches `ship`');
    expect(res.out).toContain('    cli.ship@1 retired, from ship; 1 waiting\n      1 waiting at confirm: its path reaches a call of it (ship)\n');
    const missing = await run('handlers', '--handler', 'TEST', '--path', '/shipp', ...target(reader));
    expect(missing.code).toBe(3);
    expect(missing.err).toContain('FLOW_UNCALLED_HANDLER');
  });
});
