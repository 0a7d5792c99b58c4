import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { RetentionReportBody } from '../../contracts/api/history.ts';
import type { WorkflowRecord } from '../../contracts/index.ts';
import { readArchive } from '../../engine/runtime/archive.ts';
import { flag, parseArgs, UsageError } from '../args.ts';
import { api, EXIT, targetOf } from '../http.ts';

/** Legal hold, erasure and retention against a running engine's API; archive restore on local files. */
export const HISTORY_USAGE: Record<string, string> = {
  hold: 's8flow hold <id> --reason R | s8flow hold release <id> --reason R   [--url URL] [--token T] [--env E] [--json]',
  erase: 's8flow erase <id> --reason R   [--url URL] [--token T] [--env E] [--json]',
  retention: 's8flow retention run [--dry-run]   [--url URL] [--token T] [--json]',
  archive: 's8flow archive restore <file> [--out DIR]   (one trace file per instance, for s8flow trace / replay)',
};

const out = (s: string) => process.stdout.write(s);

export function historyCommand(name: string): (argv: string[]) => Promise<number> {
  return async (argv) => {
    const args = parseArgs(argv, ['json', 'dry-run']);
    const usage = HISTORY_USAGE[name]!;
    const asJson = flag(args, 'json') === 'true';
    const [first, second, ...extra] = args.positionals;
    switch (name) {
      case 'hold':
      case 'erase': {
        const release = name === 'hold' && first === 'release';
        const id = release ? second : first;
        if (id === undefined || extra.length > 0 || (!release && second !== undefined)) throw new UsageError(`usage: ${usage}`);
        const reason = flag(args, 'reason');
        if (reason === undefined || reason === '') throw new UsageError(`--reason is required: ${usage}`);
        const verb = name === 'erase' ? 'erase' : release ? 'release-hold' : 'hold';
        const r = await api<WorkflowRecord>(targetOf(args), 'POST', `/workflows/${encodeURIComponent(id)}/${verb}`, { reason });
        out(asJson ? `${JSON.stringify(r, null, 2)}\n` : `${verb} ${r.id}: ${r.state}\n`);
        return EXIT.ok;
      }
      case 'retention': {
        if (first !== 'run' || second !== undefined) throw new UsageError(`usage: ${usage}`);
        const dryRun = flag(args, 'dry-run') === 'true';
        const r = await api<RetentionReportBody>(targetOf(args), 'POST', '/v1/retention/run', dryRun ? { dryRun } : {});
        if (asJson) out(`${JSON.stringify(r, null, 2)}\n`);
        else {
          out(`${r.dryRun ? 'would remove' : 'removed'} ${r.instancesRemoved} instance(s), ${r.dryRun ? 'would drop' : 'dropped'} ${r.partitionsDropped.length} partition(s)\n`);
          out(`${r.dryRun ? 'would free' : 'freed'} ${r.bytesFreed} bytes (history ${r.bytesBefore} → ${r.bytesAfter})\n`);
          for (const f of r.archiveFiles) out(`archived to ${f}\n`);
        }
        return EXIT.ok;
      }
      case 'archive': {
        if (first !== 'restore' || second === undefined || extra.length > 0) throw new UsageError(`usage: ${usage}`);
        const dir = flag(args, 'out') ?? '.';
        await mkdir(dir, { recursive: true });
        let n = 0;
        for await (const trace of readArchive(second)) {
          const file = join(dir, `${trace.initial.id}.trace.json`);
          await writeFile(file, `${JSON.stringify(trace, null, 2)}\n`);
          if (!asJson) out(`${file}\n`);
          n++;
        }
        if (asJson) out(`${JSON.stringify({ restored: n, dir })}\n`);
        return EXIT.ok;
      }
      default:
        throw new UsageError(`usage: ${usage}`);
    }
  };
}
