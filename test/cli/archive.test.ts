import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../support/cli.ts';

const run = (...argv: string[]) => runCli(argv);

const trace = (id: string) => ({
  format: 'sentin8-flow.trace/1',
  logicHash: `sha256:${'a'.repeat(64)}`,
  initial: { id, env: 'default', input: { n: 1 } },
  entries: [{ event: { type: 'begin' }, decision: { state: 'completed' }, atMs: 1, from: 'pending' }],
  final: { state: 'completed', currentStep: null, generation: 0, output: null, error: null },
});

/** `s8flow archive restore`: an archive back into one trace file per instance, for replay. */
describe('s8flow archive restore', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 's8flow-restore-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('writes each line of an archive as <id>.trace.json, unchanged', async () => {
    const file = join(dir, 'history-20260105.ndjson');
    await writeFile(file, `${JSON.stringify(trace('w-1'))}\n${JSON.stringify(trace('w-2'))}\n`);
    const res = await run('archive', 'restore', file, '--out', join(dir, 'traces'));
    expect(res).toMatchObject({ code: 0, err: '' });
    for (const id of ['w-1', 'w-2']) expect(JSON.parse(await readFile(join(dir, 'traces', `${id}.trace.json`), 'utf8'))).toEqual(trace(id));
  });

  it('refuses a line that is not a trace, naming the file and line', async () => {
    const file = join(dir, 'history-bad.ndjson');
    await writeFile(file, `${JSON.stringify(trace('w-3'))}\n{"format":"something else"}\n`);
    const res = await run('archive', 'restore', file, '--out', join(dir, 'bad'));
    expect(res.code).toBe(1);
    expect(res.err).toMatch(/history-bad\.ndjson line 2: .*\[FLOW_ARCHIVE_INVALID\]/);
  });

  it('hold and erase ask for a reason', async () => {
    expect((await run('erase', 'w-1', '--url', 'http://127.0.0.1:9', '--token', 't')).code).toBe(2);
    expect((await run('hold', 'release', 'w-1', '--url', 'http://127.0.0.1:9', '--token', 't')).code).toBe(2);
  });
});
