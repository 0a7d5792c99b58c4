import { createFlowClient, FlowApiError } from '../../client/index.ts';
import type { BulkJob } from '../../contracts/api/bulk.ts';
import type { MigrateRequest, MigrationGroup, MigrationPlan } from '../../contracts/api/migrations.ts';
import { type Args, flag, parseArgs, UsageError } from '../args.ts';
import { ApiProblem, EXIT, exitFor, targetOf } from '../http.ts';
import { progress, table } from '../table.ts';

export const MIGRATE_USAGE =
  's8flow migrate <logicId> --from N --to M [--ids ID,ID…] [--state S] [--step S] [--rename OLD=NEW]… [--limit N] [--after ID] [--page-size N] [--allow-retired] --reason R [--apply] [--url URL] [--token T] [--env E] [--json]';

const out = (s: string) => process.stdout.write(s);

/**
 * `s8flow migrate`: moves instances of version N of a definition to a later version M, through
 * the typed client (docs/versions.md, "Migrating instances"). A dry run by default — per instance
 * where it lands, what runs next under which keys, or why it stays; `--apply` starts the
 * migration's bulk job and follows it to its end (exit 6 when an instance was refused).
 */
export async function migrateCommand(argv: string[]): Promise<number> {
  const args = parseArgs(argv, ['json', 'apply', 'allow-retired']);
  const [logicId, ...extra] = args.positionals;
  if (logicId === undefined || extra.length > 0) throw new UsageError(`usage: ${MIGRATE_USAGE}`);
  const apply = flag(args, 'apply') === 'true';
  const req = requestOf(args, logicId, apply);
  const t = targetOf(args);
  const client = createFlowClient({ baseUrl: t.url, token: t.token, env: t.env });
  try {
    if (!apply) {
      const at = page(args);
      const p = await client.previewMigration({ ...req, ...at });
      if (flag(args, 'json') === 'true') out(`${JSON.stringify(p, null, 2)}\n`);
      else {
        out(`${p.logicId}@${p.from.version} → @${p.to.version}: ${p.selected} selected, ${p.moves} would move, ${p.refused} refused (dry run; --apply moves them)\n`);
        out(`by shape, ${p.groups.length} group${p.groups.length === 1 ? '' : 's'}:\n`);
        for (const g of p.groups) out(`  ${groupLine(g)}\n`);
        out(`instances${at.after === undefined ? '' : ` after ${at.after}`}:\n`);
        for (const item of p.items) out(`${planLine(item)}\n`);
        if (p.nextAfter !== null) out(`more: --after ${p.nextAfter}\n`);
      }
      return EXIT.ok;
    }
    let job: BulkJob = await client.startMigration(req);
    const bar = progress('migrate', job.total);
    while (job.state === 'running') {
      bar(job.done, job.failed);
      await new Promise((r) => setTimeout(r, 250));
      job = await client.bulkJob(job.id);
    }
    bar(job.done, job.failed);
    if (flag(args, 'json') === 'true') out(`${JSON.stringify(job, null, 2)}\n`);
    else {
      out(table(job.items.map((i) => ({ ...i, error: i.error === null ? '' : `${i.error.code}: ${i.error.message}` })), ['workflowId', 'status', 'state', 'error']));
      out(`job ${job.id} ${job.state}: ${job.done - job.failed} moved, ${job.failed} refused of ${job.total}\n`);
    }
    return job.failed > 0 || job.state === 'aborted' ? EXIT.bulkFailures : EXIT.ok;
  } catch (err) {
    if (err instanceof FlowApiError || (err instanceof Error && 'code' in err && err.code === 'FLOW_CLIENT_UNREACHABLE')) {
      const status = (err as FlowApiError).status ?? 503;
      throw new ApiProblem(status, (err as FlowApiError).code, err.message, exitFor(status));
    }
    throw err;
  }
}

/** `--after`, `--page-size`: which page of the dry run's instances. */
function page(args: Args): { after?: string; pageSize?: number } {
  const after = flag(args, 'after');
  const size = flag(args, 'page-size');
  if (size !== undefined && !(Number.isInteger(Number(size)) && Number(size) >= 1)) throw new UsageError(`--page-size takes a whole number >= 1: ${MIGRATE_USAGE}`);
  return { ...(after === undefined ? {} : { after }), ...(size === undefined ? {} : { pageSize: Number(size) }) };
}

function requestOf(args: Args, logicId: string, apply: boolean): Omit<MigrateRequest, 'dryRun'> {
  const version = (name: string) => {
    const raw = flag(args, name);
    const n = Number(raw);
    if (raw === undefined || !Number.isInteger(n) || n < 1) throw new UsageError(`--${name} takes a version (a whole number >= 1): ${MIGRATE_USAGE}`);
    return n;
  };
  const renames: Record<string, string> = {};
  for (const r of args.flags.get('rename') ?? []) {
    const [old, now, ...rest] = r.split('=');
    if (!old || !now || rest.length > 0) throw new UsageError(`--rename ${r}: write --rename OLD=NEW`);
    renames[old] = now;
  }
  const ids = flag(args, 'ids')?.split(',').filter((s) => s !== '');
  const state = flag(args, 'state');
  const step = flag(args, 'step');
  const limit = flag(args, 'limit');
  const reason = flag(args, 'reason');
  if (apply && reason === undefined) throw new UsageError(`--reason is required with --apply (it is audited): ${MIGRATE_USAGE}`);
  const filter = { ...(state === undefined ? {} : { state }), ...(step === undefined ? {} : { step }) };
  return {
    logicId,
    fromVersion: version('from'),
    toVersion: version('to'),
    reason: reason ?? 'dry run',
    ...(ids === undefined ? {} : { ids }),
    ...(Object.keys(filter).length === 0 ? {} : { filter }),
    ...(Object.keys(renames).length === 0 ? {} : { renames }),
    ...(limit === undefined ? {} : { limit: Number(limit) }),
    ...(flag(args, 'allow-retired') === 'true' ? { allowRetired: true } : {}),
  };
}

/** One shape group of the dry run on one line: how many, where they are, and where they land or why they stay (keys: its representative's). */
function groupLine(g: MigrationGroup): string {
  const at = `${g.count} × ${g.state} at ${g.currentStep ?? '—'}`;
  if (g.refusal !== null) return `${at}: REFUSED ${g.refusal.code}${g.refusal.retryable ? ' (retryable)' : ''}: ${g.refusal.message}`;
  return `${at} → @${g.lands!.version} ${g.lands!.step ?? '—'}; next${g.next?.assumes ? ` (if ${g.next.assumes})` : ''}: ${nextOf(g.next)} (keys of ${g.representative})`;
}

/** One instance of the dry run on one line: where it lands, the key it keeps, what runs next under which keys; or its refusal. */
function planLine(p: MigrationPlan): string {
  const at = `${p.workflowId}  ${p.state} at ${p.from.step ?? '—'}`;
  if (p.refusal !== null) return `${at}: REFUSED ${p.refusal.code}${p.refusal.retryable ? ' (retryable)' : ''}: ${p.refusal.message}`;
  const keeps = p.keeps === null ? '' : `; keeps ${p.keeps.step} attempt ${p.keeps.attempt} [${p.keeps.idempotencyKey}]`;
  const assumes = p.next?.assumes ? ` (if ${p.next.assumes})` : '';
  return `${at} → @${p.lands!.version} ${p.lands!.step ?? '—'}${keeps}; next${assumes}: ${nextOf(p.next)}`;
}

/** The calls that run next under their keys, and where the simulation stops. */
function nextOf(next: MigrationPlan['next']): string {
  const calls = (next?.steps ?? []).filter((s) => s.callsOut).map((s) => `${s.step}${s.compensation ? ' (undo)' : ''} [${s.idempotencyKey}]`);
  const stops = next === null ? '' : `; stops ${next.stopsAt.state}${next.stopsAt.step ? ` at ${next.stopsAt.step}` : ''}`;
  return `${calls.join(' → ') || 'no call'}${stops}`;
}
