import type { BackfillResponse, Schedule, ScheduleDetail, ScheduleList } from '../../contracts/api/schedules.ts';
import { flag, parseArgs, UsageError } from '../args.ts';
import { api, EXIT, jsonFlag, targetOf } from '../http.ts';
import { table } from '../table.ts';

const SUBCOMMANDS = {
  list: 'list',
  show: 'show <id>',
  create: 'create <id> <logicId> --cron "0 6 1 * *" [--timezone Europe/Berlin] [--overlap skip|buffer_one|allow] [--catch-up PT5M] [--input JSON|@file]',
  pause: 'pause <id> [--reason R]',
  resume: 'resume <id> [--reason R]',
  delete: 'delete <id>',
  trigger: 'trigger <id> [--reason R]',
  backfill: 'backfill <id> --from ISO --to ISO [--dry-run] [--reason R]',
} as const;

export const SCHEDULES_USAGE = `s8flow schedules ${Object.keys(SUBCOMMANDS).join('|')} …   (s8flow schedules --help) [--url URL] [--token T] [--env E] [--json]`;

const out = (s: string) => process.stdout.write(s);
const json = (v: unknown) => out(`${JSON.stringify(v, null, 2)}\n`);
const path = (id: string) => `/schedules/${encodeURIComponent(id)}`;

/** `s8flow schedules …`: cron schedules through the API (README, Schedules). */
export async function schedulesCommand(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined || !(sub in SUBCOMMANDS)) {
    const lines = Object.values(SUBCOMMANDS).map((u) => `  s8flow schedules ${u}`);
    throw new UsageError(`usage:\n${lines.join('\n')}\n  (each also takes [--url URL] [--token T] [--env E] [--json])`);
  }
  const usage = `s8flow schedules ${SUBCOMMANDS[sub as keyof typeof SUBCOMMANDS]}`;
  const args = parseArgs(rest, ['json', 'dry-run']);
  const t = targetOf(args);
  const asJson = flag(args, 'json') === 'true';
  const one = (n: number) => {
    if (args.positionals.length !== n) throw new UsageError(`usage: ${usage}`);
    return args.positionals;
  };
  const reason = flag(args, 'reason');
  const act = reason === undefined ? {} : { reason };
  const showOne = (s: Schedule) => (asJson ? json(s) : out(`${s.id}  ${s.paused ? 'paused' : 'active'}  next ${s.nextAt ?? '-'}  (${s.cron} ${s.timezone})\n`));
  switch (sub) {
    case 'list': {
      one(0);
      const { items } = await api<ScheduleList>(t, 'GET', '/schedules');
      if (asJson) json(items);
      else out(table(items.map((s) => ({ ...s, state: s.paused ? 'paused' : 'active', next: s.nextAt ?? '-' })), ['id', 'logicId', 'origin', 'cron', 'timezone', 'overlap', 'state', 'next']));
      return EXIT.ok;
    }
    case 'show': {
      const [id] = one(1);
      const s = await api<ScheduleDetail>(t, 'GET', path(id!));
      if (asJson) json(s);
      else {
        showOne(s);
        out(table(s.ticks, ['tickAt', 'outcome', 'via', 'workflowId']));
      }
      return EXIT.ok;
    }
    case 'create': {
      const [id, logicId] = one(2);
      const cron = flag(args, 'cron');
      if (cron === undefined) throw new UsageError(`--cron is required: ${usage}`);
      const input = await jsonFlag(args, 'input');
      const body = {
        id,
        logicId,
        cron,
        ...opt('timezone', flag(args, 'timezone')),
        ...opt('overlap', flag(args, 'overlap')),
        ...opt('catchUp', flag(args, 'catch-up')),
        ...opt('input', input),
        ...act,
      };
      showOne(await api<Schedule>(t, 'POST', '/schedules', body));
      return EXIT.ok;
    }
    case 'pause':
    case 'resume': {
      const [id] = one(1);
      showOne(await api<Schedule>(t, 'POST', `${path(id!)}/${sub}`, act));
      return EXIT.ok;
    }
    case 'delete': {
      const [id] = one(1);
      const r = await api<unknown>(t, 'DELETE', path(id!));
      if (asJson) json(r);
      else out(`${id}  deleted\n`);
      return EXIT.ok;
    }
    case 'trigger': {
      const [id] = one(1);
      const r = await api<{ workflowId: string; tickAt: string }>(t, 'POST', `${path(id!)}/trigger`, act);
      if (asJson) json(r);
      else out(`${r.workflowId}  started by ${id} at ${r.tickAt}\n`);
      return EXIT.ok;
    }
    default: {
      const [id] = one(1);
      const from = flag(args, 'from');
      const to = flag(args, 'to');
      if (from === undefined || to === undefined) throw new UsageError(`--from and --to are required: ${usage}`);
      const r = await api<BackfillResponse>(t, 'POST', `${path(id!)}/backfill`, { from, to, dryRun: flag(args, 'dry-run') === 'true', ...act });
      if (asJson) json(r);
      else {
        out(table(r.ticks.map((x) => ({ ...x, result: r.dryRun ? (x.created ? 'would start' : 'started before') : x.created ? 'started' : 'started before' })), ['tickAt', 'result', 'workflowId']));
        out(`${r.ticks.filter((x) => x.created).length} of ${r.ticks.length} tick(s) ${r.dryRun ? 'would start' : 'started'}\n`);
      }
      return EXIT.ok;
    }
  }
}

function opt(key: string, value: unknown): Record<string, unknown> {
  return value === undefined ? {} : { [key]: value };
}

