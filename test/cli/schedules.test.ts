import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DevHandle, startDev } from '../../cli/commands/dev.ts';
import { runCli } from '../support/cli.ts';
import { EXAMPLES } from '../compiler/project-helpers.ts';

/**
 * `s8flow dev` on the examples registers statements.monthly's declared schedule, and
 * `s8flow schedules …` manages it (and one of its own) through the dev server's API.
 */
// a fresh PGlite folder runs initdb (seconds; a minute on a loaded machine): waits, not assertions
describe('s8flow schedules against s8flow dev on the examples', { timeout: 240_000 }, () => {
  const state = mkdtempSync(join(tmpdir(), 's8flow-sched-'));
  const lines: string[] = [];
  let dev: DevHandle;
  beforeAll(async () => {
    dev = await startDev({ root: EXAMPLES, stateDir: state, host: '127.0.0.1', port: 0, log: (s) => lines.push(s) });
    await dev.firstBuild;
  });
  afterAll(async () => {
    await dev?.close();
    rmSync(state, { recursive: true, force: true });
  });

  const run = (...argv: string[]) => runCli(['schedules', ...argv, '--url', dev.url, '--token', dev.token]);

  it('dev registers statements.monthly on its schedule and says when it fires next', async () => {
    expect(lines.join('\n')).toMatch(/schedule statements\.monthly:house-account {2}0 6 1 \* \* Europe\/Berlin {2}next \d{4}-\d\d-01T0[45]:00:00\.000Z/);
    const ls = await run('list');
    expect(ls.code).toBe(0);
    expect(ls.out.split('\n')[0]).toMatch(/^id\s+logicId\s+origin\s+cron/);
    expect(ls.out).toMatch(/statements\.monthly:house-account\s+statements\.monthly\s+declared\s+0 6 1 \* \*\s+Europe\/Berlin\s+skip\s+active/);
  });

  it('trigger starts an instance of the schedule now; pause and resume; a declared one is not deleted', async () => {
    const id = 'statements.monthly:house-account';
    const t = await run('trigger', id, '--reason', 'try it');
    expect(t.code).toBe(0);
    const workflowId = t.out.split(' ')[0]!;
    const record = await dev.engine.get(workflowId);
    expect(record).toMatchObject({ logicId: 'statements.monthly', input: { accountId: 'acct-house', currency: 'EUR', channel: 'web' } });
    expect((await run('pause', id)).out).toMatch(/paused/);
    expect((await run('resume', id)).out).toMatch(/active {2}next/);
    const del = await run('delete', id);
    expect(del.code).toBe(4);
    expect(del.err).toMatch(/FLOW_SCHEDULE_DECLARED/);
    const show = JSON.parse((await run('show', id, '--json')).out);
    expect(show.ticks[0]).toMatchObject({ outcome: 'started', via: 'trigger', workflowId });
  });

  it('create, backfill with a dry run, backfill twice (nothing new the second time), delete', async () => {
    const made = await run('create', 'ops.hourly', 'statements.monthly', '--cron', '0 * * * *', '--overlap', 'allow', '--input', '{"accountId":"acct-9","currency":"EUR","channel":"web"}');
    expect(made.code).toBe(0);
    const from = new Date(Date.now() - 3 * 3_600_000).toISOString();
    const to = new Date(Date.now() - 3_600_000).toISOString();
    const dry = await run('backfill', 'ops.hourly', '--from', from, '--to', to, '--dry-run');
    expect(dry.out).toMatch(/2 of 2 tick\(s\) would start|3 of 3 tick\(s\) would start/);
    const first = await run('backfill', 'ops.hourly', '--from', from, '--to', to);
    expect(first.out).toMatch(/(\d) of \1 tick\(s\) started/);
    const again = await run('backfill', 'ops.hourly', '--from', from, '--to', to);
    expect(again.out).toMatch(/0 of \d tick\(s\) started/);
    expect((await run('delete', 'ops.hourly')).out).toBe('ops.hourly  deleted\n');
    expect((await run('nonsense')).code).toBe(2);
  });
});
