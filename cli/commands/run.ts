import { readFile, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import { TERMINAL_STATES, type WorkflowRecord } from '../../contracts/index.ts';
import { loadHandlerProfiles } from '../../engine/executors/index.ts';
import { artifactModules, publishOrder, readArtifactDir, readLogicFile } from '../../engine/runtime/artifacts.ts';
import { parseAllowlist } from '../../engine/executors/allowlist.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { openDb } from '../../engine/store/db.ts';
import { migrate } from '../../engine/store/migrate.ts';
import { type Args, flag, parseArgs, UsageError } from '../args.ts';
import { printTimeline } from '../timeline.ts';
import { RUN_USAGE } from './run-usage.ts';

/**
 * Runs one instance in process on an in-memory embedded store (README.md, The command) until it is
 * terminal or parked, and prints its WorkflowRecord. Every LogicVersion beside the named file is
 * published too, so children resolve. Exit code 0 for completed or waiting, 1 otherwise.
 */
export async function runCommand(argv: string[]): Promise<number> {
  const args = parseArgs(argv, ['json']);
  const target = args.positionals[0];
  if (target === undefined) throw new UsageError(`usage: ${RUN_USAGE}`);
  const input = await readInput(args);
  const { start, all, dir } = await loadTarget(target);

  const db = await openDb();
  const engine = new Engine({
    db,
    executors: {
      handlers: loadHandlerProfiles(process.env, handlerOverrides(args)),
      httpAllowlist: [...(args.flags.get('allow-host') ?? []), ...parseAllowlist(process.env['FLOW_HTTP_ALLOWLIST'])],
    },
    worker: { pollMs: 10 },
  });
  try {
    await migrate(db);
    for (const doc of publishOrder(all)) await engine.publishVersion(engine.env, doc, await artifactModules(dir, doc));
    await engine.workers.start();
    const { id } = await engine.start({ logicId: start.logicId, version: start.version, input });
    const record = await engine.settled(id);
    if (flag(args, 'json') === 'true') process.stdout.write(`${JSON.stringify(record, null, 2)}\n`);
    else printTimeline(record);
    return exitCodeOf(record);
  } finally {
    await engine.close();
    await db.close();
  }
}

function exitCodeOf(record: WorkflowRecord): number {
  return record.state === 'completed' || !TERMINAL_STATES.has(record.state as never) ? 0 : 1;
}

async function readInput(args: Args): Promise<unknown> {
  const raw = flag(args, 'input');
  if (raw === undefined) throw new UsageError(`--input is required; usage: ${RUN_USAGE}`);
  const text = raw.startsWith('@') ? await readFile(raw.slice(1), 'utf8') : raw;
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new UsageError(`--input is not JSON: ${(err as Error).message}`);
  }
}

function handlerOverrides(args: Args): Record<string, string> {
  const out: Record<string, string> = {};
  for (const h of args.flags.get('handler') ?? []) {
    const eq = h.indexOf('=');
    if (eq <= 0) throw new UsageError(`--handler takes NAME=URL, not ${h}`);
    out[h.slice(0, eq)] = h.slice(eq + 1);
  }
  return out;
}

async function loadTarget(target: string) {
  if ((await stat(target)).isDirectory()) {
    const all = await readArtifactDir(target);
    if (all.length !== 1) {
      throw new UsageError(`${target} holds ${all.length} LogicVersions; name the file of the one to start`);
    }
    return { start: all[0]!, all, dir: target };
  }
  const start = await readLogicFile(target);
  const all = (await readArtifactDir(dirname(target))).filter((d) => d.hash !== start.hash);
  return { start, all: [start, ...all], dir: dirname(target) };
}
