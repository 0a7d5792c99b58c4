import { createReadStream } from 'node:fs';
import { appendFile, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { WorkflowTrace } from '../../contracts/api/workflows.ts';
import type { Trace } from '../core/journal.ts';
import { ArchiveInvalid } from '../errors.ts';
import type { Client } from '../store/tx.ts';
import { readTrace, type TRACE_FORMAT } from './export-trace.ts';

export type ArchivedTrace = Trace & { format: typeof TRACE_FORMAT };

/** The archive file of one history week (its partitions' suffix, `YYYYMMDD`) in `dir`. */
export function archiveFile(dir: string, week: string): string {
  return join(dir, `history-${week}.ndjson`);
}

/**
 * Appends the traces of `instances` (the `s8flow trace` format, one per line) to their week's
 * file in `dir`, before retention removes them. Answers the files written. A file is only ever
 * appended to: a week removed in several runs (its live instances ended later) keeps one file.
 */
export async function archiveInstances(c: Client, dir: string, instances: readonly { id: string; env: string; week: string }[]): Promise<string[]> {
  await mkdir(dir, { recursive: true });
  const byWeek = new Map<string, string[]>();
  for (const i of instances) {
    // on the caller's connection (it holds the retention lock; an embedded store has no other), in the instance's env
    await c.query("BEGIN; SELECT set_config('app.env_id', $1, true), set_config('role', 'flow_app', true)".replace('$1', c.escapeLiteral(i.env)));
    const line = await readTrace(c, i.id).then(
      async (t) => {
        await c.query('COMMIT');
        return JSON.stringify(t);
      },
      async (err: unknown) => {
        await c.query('ROLLBACK');
        throw err;
      },
    );
    byWeek.set(i.week, [...(byWeek.get(i.week) ?? []), line]);
  }
  const files: string[] = [];
  for (const [week, lines] of byWeek) {
    const file = archiveFile(dir, week);
    await appendFile(file, `${lines.join('\n')}\n`);
    files.push(file);
  }
  return files;
}

/**
 * Reads an archive file back: each line a trace that `replay(logic, trace)` (sentin8-flow/testing)
 * and `s8flow trace` accept. A line that is not one is FLOW_ARCHIVE_INVALID, naming it.
 */
export async function* readArchive(file: string): AsyncGenerator<ArchivedTrace> {
  const lines = createInterface({ input: createReadStream(file, 'utf8'), crlfDelay: Number.POSITIVE_INFINITY });
  let n = 0;
  for await (const line of lines) {
    n++;
    if (line.trim() === '') continue;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      throw new ArchiveInvalid(file, n, 'not JSON');
    }
    const parsed = WorkflowTrace.safeParse(value);
    if (!parsed.success) throw new ArchiveInvalid(file, n, parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '));
    yield value as ArchivedTrace;
  }
}
