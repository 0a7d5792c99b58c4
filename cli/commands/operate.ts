import type { BulkJob, BulkPreview } from '../../contracts/api/bulk.ts';
import type { VerbPreview } from '../../contracts/api/verbs.ts';
import type { WorkflowHistory, WorkflowPage } from '../../contracts/api/workflows.ts';
import type { WorkflowRecord } from '../../contracts/index.ts';
import { timelineOrder } from '../../contracts/timeline.ts';
import { type Args, flag, parseArgs, UsageError } from '../args.ts';
import { api, EXIT, jsonFlag, targetOf } from '../http.ts';
import { progress, table } from '../table.ts';

/** The operator commands: each one HTTP call (or a few) against a running engine's API. */
export const OPERATE_USAGE: Record<string, string> = {
  ls: 's8flow ls [--state S] [--logic-id ID] [--version N] [--correlation-id C] [--parent ID] [--from ISO] [--to ISO] [--stuck] [--sla-breached] [--attr NAME[.gt|.gte|.lt|.lte]=VALUE]... [--limit N] [--cursor C]',
  show: 's8flow show <id>',
  history: 's8flow history <id>',
  retry: 's8flow retry <id> --reason R [--dry-run]',
  repair: 's8flow repair <id> --step S [--input JSON|@file] [--compensate-rewound] --reason R [--dry-run]',
  cancel: 's8flow cancel <id> [--compensate] --reason R [--dry-run]',
  decide: 's8flow decide <id> <step> --option O [--payload JSON|@file] [--reason R]',
  'force-complete': 's8flow force-complete <id> --step S --output JSON|@file --reason R [--dry-run]',
  replay: 's8flow replay <id> --step S --reason R [--dry-run]',
  bulk: 's8flow bulk <retry|cancel|replay> [--state S] [--logic-id ID] [--version N] [--correlation-id C] [--parent ID] [--stuck] [--sla-breached] [--attr NAME[.OP]=VALUE]... [--from ISO] [--to ISO] --reason R [--step S] [--compensate] [--dry-run] [--limit N]',
};
const COMMON = ' [--url URL] [--token T] [--env E] [--json]';
for (const k of Object.keys(OPERATE_USAGE)) OPERATE_USAGE[k] += COMMON;

const BOOLEANS = ['json', 'dry-run', 'compensate', 'stuck', 'compensate-rewound', 'sla-breached'];

/** Each `--attr NAME=VALUE` (or `NAME.gte=VALUE`…): a search-attribute filter (docs/search-attributes.md). */
function attrFlags(args: Args): Record<string, string> {
  const out: Record<string, string> = {};
  for (const a of args.flags.get('attr') ?? []) {
    const eq = a.indexOf('=');
    if (eq <= 0) throw new UsageError(`--attr ${a}: write --attr NAME=VALUE, or NAME.gt|gte|lt|lte=VALUE for a range`);
    out[a.slice(0, eq)] = a.slice(eq + 1);
  }
  return out;
}

const out = (s: string) => process.stdout.write(s);
const json = (v: unknown) => out(`${JSON.stringify(v, null, 2)}\n`);

function need(args: Args, name: string, usage: string): string {
  const v = flag(args, name);
  if (v === undefined || v === '') throw new UsageError(`--${name} is required: ${usage}`);
  return v;
}

function one(args: Args, usage: string, n = 1): string[] {
  if (args.positionals.length !== n) throw new UsageError(`usage: ${usage}`);
  return args.positionals;
}

export function operateCommand(name: string): (argv: string[]) => Promise<number> {
  return async (argv) => {
    const args = parseArgs(argv, BOOLEANS);
    const usage = OPERATE_USAGE[name]!;
    const asJson = flag(args, 'json') === 'true';
    const t = targetOf(args);
    switch (name) {
      case 'ls': {
        const q = new URLSearchParams();
        for (const [f, p] of [
          ['state', 'state'],
          ['logic-id', 'logicId'],
          ['version', 'version'],
          ['correlation-id', 'correlationId'],
          ['parent', 'parent'],
          ['limit', 'limit'],
          ['cursor', 'cursor'],
          ['from', 'from'],
          ['to', 'to'],
        ] as const) {
          const v = flag(args, f);
          if (v !== undefined) q.set(p, v);
        }
        const stuck = flag(args, 'stuck') === 'true';
        if (stuck) q.set('stuck', 'true');
        if (flag(args, 'sla-breached') === 'true') q.set('slaBreached', 'true');
        for (const [k, v] of Object.entries(attrFlags(args))) q.set(`attr.${k}`, v);
        const page = await api<WorkflowPage>(t, 'GET', `/workflows?${q}`);
        if (asJson) json(page);
        else {
          const columns = ['id', 'logicId', 'version', 'state', 'currentStep', 'correlationId', 'updatedAt'] as const;
          // a stuck listing says why each one is stuck (docs/operations.md, "Runbook: stuck instances")
          if (stuck) out(table(page.items.map((i) => ({ ...i, reason: i.stuckReason })), [...columns, 'reason']));
          else out(table(page.items, [...columns]));
          if (page.nextCursor) out(`more: --cursor ${page.nextCursor}\n`);
        }
        return EXIT.ok;
      }
      case 'show': {
        const [id] = one(args, usage);
        const r = await api<WorkflowRecord>(t, 'GET', `/workflows/${id}`);
        if (asJson) json(r);
        else {
          out(`${r.id}  ${r.logicId}@${r.version}  ${r.state}${r.currentStep ? ` at ${r.currentStep}` : ''}  generation ${r.generation}\n`);
          if (r.error) out(`error: ${r.error.code}: ${r.error.message}\n`);
          out(table(r.steps.map(attemptRow), ['step', 'kind', 'attempt', 'gen', 'state', 'ms', 'key', 'error']));
          if (r.compensations.length > 0) {
            out('compensations:\n');
            out(table(r.compensations.map((c) => ({ ...c, gen: c.generation, error: c.error?.code })), ['step', 'gen', 'state', 'attempts', 'error']));
          }
        }
        return EXIT.ok;
      }
      case 'history': {
        const [id] = one(args, usage);
        const h = await api<WorkflowHistory>(t, 'GET', `/workflows/${id}/history`);
        if (asJson) json(h);
        else {
          const rows = [
            ...h.attempts.map((a) => ({ at: a.startedAt, audit: false, what: a.kind === 'compensation' ? `undo ${a.step}` : a.step, ...attemptRow(a) })),
            ...h.audit.map((e) => ({ at: e.at, audit: true, what: `audit ${e.verb}`, state: `by ${e.actor}`, error: e.reason ?? '' })),
          ].sort(timelineOrder);
          out(table(rows, ['at', 'what', 'attempt', 'gen', 'state', 'ms', 'key', 'error']));
        }
        return EXIT.ok;
      }
      case 'retry':
      case 'repair':
      case 'cancel':
      case 'force-complete':
      case 'replay': {
        const [id] = one(args, usage);
        const dryRun = flag(args, 'dry-run') === 'true';
        const reason = dryRun ? (flag(args, 'reason') ?? 'dry run') : need(args, 'reason', usage);
        const body: Record<string, unknown> = { reason, ...(dryRun ? { dryRun } : {}) };
        if (name === 'repair') {
          body['rewindTo'] = need(args, 'step', usage);
          const input = await jsonFlag(args, 'input');
          if (input !== undefined) body['input'] = input;
          if (flag(args, 'compensate-rewound') === 'true') body['compensateRewound'] = true;
        }
        if (name === 'replay') body['step'] = need(args, 'step', usage);
        if (name === 'force-complete') {
          body['step'] = need(args, 'step', usage);
          body['output'] = await jsonFlag(args, 'output');
          if (body['output'] === undefined) throw new UsageError(`--output is required: ${usage}`);
        }
        if (name === 'cancel') body['compensate'] = flag(args, 'compensate') === 'true';
        const res = await api<WorkflowRecord | VerbPreview>(t, 'POST', `/workflows/${id}/${name}`, body);
        if (asJson) json(res);
        else if ('dryRun' in res) printPreview(name, res);
        else out(`${res.id}  ${res.state}${res.currentStep ? ` at ${res.currentStep}` : ''}  generation ${res.generation}\n`);
        return EXIT.ok;
      }
      case 'decide': {
        const [id, step] = one(args, usage, 2);
        const payload = await jsonFlag(args, 'payload');
        const reason = flag(args, 'reason');
        const res = await api<WorkflowRecord>(t, 'POST', `/workflows/${id}/decisions/${encodeURIComponent(step!)}`, {
          option: need(args, 'option', usage),
          ...(payload === undefined ? {} : { payload }),
          ...(reason === undefined ? {} : { reason }),
        });
        if (asJson) json(res);
        else out(`${res.id}  ${res.state}${res.currentStep ? ` at ${res.currentStep}` : ''}\n`);
        return EXIT.ok;
      }
      case 'bulk':
        return bulk(args, t, usage, asJson);
      default:
        throw new UsageError(`unknown command ${name}`);
    }
  };
}

function attemptRow(a: WorkflowRecord['steps'][number]) {
  return {
    step: a.step,
    kind: a.kind,
    attempt: a.attempt,
    gen: a.generation,
    state: a.state,
    ms: a.finishedAt ? Date.parse(a.finishedAt) - Date.parse(a.startedAt) : '',
    key: a.idempotencyKey,
    error: a.error ? `${a.error.code}: ${a.error.message}` : '',
  };
}

function printPreview(verb: string, p: VerbPreview): void {
  out(`dry run of ${verb}: nothing was changed\n`);
  out(p.steps.length === 0 ? 'no step would run again\n' : table(p.steps, ['step', 'kind', 'callsOut', 'idempotencyKey']));
  if (p.compensations.length > 0) out(`would register compensations: ${p.compensations.join(', ')}\n`);
  if (p.keptEffects.length > 0) {
    out('effects of the rewound steps that stay in place (--compensate-rewound undoes them first):\n');
    out(table(p.keptEffects, ['step', 'generation', 'compensation', 'compensationKey']));
  }
  if (p.stopsAt.state === 'pending' && p.stopsAt.step !== null) {
    out(`generation ${p.generation}; what follows ${p.stopsAt.step} depends on its answer, which it never gave\n`);
  } else {
    out(`generation ${p.generation}; would stop at ${p.stopsAt.state}${p.stopsAt.step ? ` (${p.stopsAt.step})` : ''} if every call answers as before\n`);
  }
}

async function bulk(args: Args, t: ReturnType<typeof targetOf>, usage: string, asJson: boolean): Promise<number> {
  const [verb] = one(args, usage);
  const filter: Record<string, unknown> = {};
  for (const [f, p] of [
    ['state', 'state'],
    ['logic-id', 'logicId'],
    ['version', 'version'],
    ['correlation-id', 'correlationId'],
    ['parent', 'parent'],
    ['from', 'from'],
    ['to', 'to'],
  ] as const) {
    const v = flag(args, f);
    if (v !== undefined) filter[p] = p === 'version' ? Number(v) : v;
  }
  if (flag(args, 'stuck') === 'true') filter.stuck = true;
  if (flag(args, 'sla-breached') === 'true') filter.slaBreached = true;
  const attributes = attrFlags(args);
  if (Object.keys(attributes).length > 0) filter.attributes = attributes;
  const dryRun = flag(args, 'dry-run') === 'true';
  const step = flag(args, 'step');
  const limit = flag(args, 'limit');
  const body = {
    filter,
    reason: dryRun ? (flag(args, 'reason') ?? 'dry run') : need(args, 'reason', usage),
    ...(dryRun ? { dryRun } : {}),
    ...(step === undefined ? {} : { step }),
    ...(flag(args, 'compensate') === 'true' ? { compensate: true } : {}),
    ...(limit === undefined ? {} : { limit: Number(limit) }),
  };
  if (dryRun) {
    const p = await api<BulkPreview>(t, 'POST', `/bulk/${verb}`, body);
    if (asJson) json(p);
    else {
      out(`${p.count} instance(s) would get ${verb}; the first ${p.sample.length}:\n`);
      out(table(p.sample, ['id', 'logicId', 'version', 'state', 'currentStep']));
    }
    return EXIT.ok;
  }
  let job = await api<BulkJob>(t, 'POST', `/bulk/${verb}`, body);
  const bar = progress(`bulk ${verb}`, job.total);
  while (job.state === 'running') {
    bar(job.done, job.failed);
    await new Promise((r) => setTimeout(r, 250));
    job = await api<BulkJob>(t, 'GET', `/bulk/${job.id}`);
  }
  bar(job.done, job.failed);
  if (asJson) json(job);
  else {
    out(table(job.items, ['workflowId', 'status', 'state', 'error']));
    out(`job ${job.id} ${job.state}: ${job.done - job.failed} ok, ${job.failed} failed of ${job.total}\n`);
  }
  return job.failed > 0 || job.state === 'aborted' ? EXIT.bulkFailures : EXIT.ok;
}
