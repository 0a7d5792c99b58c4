import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalJson, type WorkflowRecord } from '../../contracts/index.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { FakeService } from '../support/fake-service.ts';

const run = promisify(execFile);
const BIN = new URL('../../bin/s8flow.mjs', import.meta.url).pathname;

describe('s8flow run', () => {
  let dir: string;
  let svc: FakeService;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 's8flow-run-'));
    svc = await new FakeService().on('/greet', (r) => ({ status: 200, body: { hello: (r.body as { name: string }).name } })).listen();
    const child = makeLogic({
      logicId: 'cli.child',
      domain: 'greeter',
      start: 'greet',
      steps: { greet: { kind: 'proxy', path: '/greet', input: '{ "name": input }' } },
    });
    const parent = makeLogic({
      logicId: 'cli.parent',
      domain: 'greeter',
      start: 'fan',
      steps: { fan: { kind: 'children', logicId: 'cli.child', items: 'input.names', itemInput: 'item', failurePolicy: 'fail_fast' } },
    });
    for (const doc of [child, parent]) await writeFile(join(dir, `${doc.logicId}@1.json`), canonicalJson(doc));
  });
  afterAll(async () => {
    await svc.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('runs the named file with its siblings loaded, so children resolve, and prints only the record with --json', async () => {
    const { stdout } = await run(
      'node',
      [BIN, 'run', join(dir, 'cli.parent@1.json'), '--input', '{"names":["ada","bo"]}', '--handler', `greeter=${svc.url}`, '--json'],
      { env: { ...process.env, NODE_NO_WARNINGS: '1' } },
    );
    const record = JSON.parse(stdout) as WorkflowRecord;
    expect(record.state).toBe('completed');
    expect(record.output).toEqual([{ hello: 'ada' }, { hello: 'bo' }]);
  });

  it('exits 2 with a usage message when --input is missing', async () => {
    await expect(run('node', [BIN, 'run', join(dir, 'cli.parent@1.json')])).rejects.toMatchObject({
      code: 2,
      stderr: expect.stringContaining('CLI_USAGE'),
    });
  });

  it('refuses input that breaks the input schema with a coded error', async () => {
    const strict = makeLogic({
      logicId: 'cli.strict',
      input: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] },
      start: 'p',
      steps: { p: { kind: 'pass' } },
    });
    const file = join(dir, 'cli.strict@1.json');
    await writeFile(file, canonicalJson(strict));
    await expect(run('node', [BIN, 'run', file, '--input', '{"n":"x"}'])).rejects.toMatchObject({
      code: 1,
      stderr: expect.stringContaining('FLOW_INPUT_INVALID'),
    });
  });
});
