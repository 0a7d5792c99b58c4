import { writeFile } from 'node:fs/promises';
import { FlowError } from '../../contracts/errors.ts';
import { exportTrace } from '../../engine/runtime/export-trace.ts';
import { openDb } from '../../engine/store/db.ts';
import { flag, parseArgs, UsageError } from '../args.ts';



/**
 * Exports one instance from the store as a trace file: its pinned LogicVersion hash, its input,
 * every journalled input with the decision committed for it, and its record now. Replay it in a
 * test with `replay(logic, trace)` from `sentin8-flow/testing`.
 */
export async function traceCommand(argv: string[]): Promise<number> {
  const args = parseArgs(argv);
  const [id, ...extra] = args.positionals;
  if (id === undefined || extra.length > 0) throw new UsageError("usage: s8flow trace <id> [--env E] [--out file]");
  const url = process.env['DATABASE_URL'];
  if (url === undefined || url === '') {
    throw new FlowError('CLI_NO_DATABASE', 'set DATABASE_URL=postgres://… (the store the instance ran on) for s8flow trace');
  }
  const db = await openDb(url, { schema: process.env['FLOW_SCHEMA'] ?? 'flow', poolSize: 1 });
  try {
    const trace = await exportTrace(db, flag(args, 'env') ?? process.env['FLOW_ENV'] ?? 'default', id);
    const text = `${JSON.stringify(trace, null, 2)}\n`;
    const out = flag(args, 'out');
    if (out === undefined) process.stdout.write(text);
    else await writeFile(out, text);
    return 0;
  } finally {
    await db.close();
  }
}
