import { createFlowClient, type FlowClient, FlowApiError } from '../../client/index.ts';
import { type Args, flag, parseArgs, UsageError } from '../args.ts';
import { ApiProblem, EXIT, exitFor, jsonFlag, targetOf } from '../http.ts';
import { table } from '../table.ts';
import type { HandlerReach } from '../../contracts/api/handlers.ts';

/**
 * Starting work and managing versions from the command line, through the typed client
 * (`sentin8-flow/client`). `s8flow start` names the server, so an instance is started with
 * `launch`; an event is ingested with `send`.
 */
export const LIFECYCLE_USAGE: Record<string, string> = {
  launch: 's8flow launch <logicId> --input JSON|@file [--version N] [--idempotency-key K] [--correlation-id C] [--priority P]',
  send: 's8flow send <eventType> --key IDEMPOTENCY_KEY [--payload JSON|@file]',
  versions: 's8flow versions [logicId]',
  retire: 's8flow retire <logicId> <version>   (new starts refused; running instances finish)',
  reactivate: 's8flow reactivate <logicId> <version>',
  handlers: 's8flow handlers [--handler NAME] [--path /p]   (who still calls each handler path; may it be turned off now)',
};
const COMMON = ' [--url URL] [--token T] [--env E] [--json]';
for (const k of Object.keys(LIFECYCLE_USAGE)) LIFECYCLE_USAGE[k] += COMMON;

const out = (s: string) => process.stdout.write(s);
const json = (v: unknown) => out(`${JSON.stringify(v, null, 2)}\n`);

function positionals(args: Args, usage: string, n: number): string[] {
  if (args.positionals.length !== n) throw new UsageError(`usage: ${usage}`);
  return args.positionals;
}

function versionArg(raw: string | undefined, usage: string): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new UsageError(`a version is a whole number >= 1, not ${raw}: ${usage}`);
  return n;
}

export function lifecycleCommand(name: string): (argv: string[]) => Promise<number> {
  return async (argv) => {
    const args = parseArgs(argv, ['json']);
    const usage = LIFECYCLE_USAGE[name]!;
    const asJson = flag(args, 'json') === 'true';
    const t = targetOf(args);
    const client = createFlowClient({ baseUrl: t.url, token: t.token, env: t.env });
    try {
      await COMMANDS[name]!(client, args, usage, asJson);
      return EXIT.ok;
    } catch (err) {
      // the client's problem, with the exit code the API commands give its status
      if (err instanceof FlowApiError || (err instanceof Error && 'code' in err && err.code === 'FLOW_CLIENT_UNREACHABLE')) {
        const status = (err as FlowApiError).status ?? 503;
        throw new ApiProblem(status, (err as FlowApiError).code, err.message, exitFor(status));
      }
      throw err;
    }
  };
}

type Run = (client: FlowClient, args: Args, usage: string, asJson: boolean) => Promise<void>;

const COMMANDS: Record<string, Run> = {
  async launch(client, args, usage, asJson) {
    const [logicId] = positionals(args, usage, 1);
    const input = await jsonFlag(args, 'input');
    if (input === undefined) throw new UsageError(`--input is required: ${usage}`);
    const version = flag(args, 'version');
    const correlationId = flag(args, 'correlation-id');
    const key = flag(args, 'idempotency-key');
    const priority = flag(args, 'priority');
    if (priority !== undefined && !/^-?\d{1,4}$/.test(priority)) throw new UsageError(`a priority is a whole number from -1000 to 1000, not ${priority}: ${usage}`);
    const { record, created } = await client.start(
      {
        logicId: logicId!,
        input: input as never,
        ...(version === undefined ? {} : { version: versionArg(version, usage) }),
        ...(correlationId === undefined ? {} : { correlationId }),
        ...(priority === undefined ? {} : { priority: Number(priority) }),
      },
      key === undefined ? {} : { idempotencyKey: key },
    );
    if (asJson) json(record);
    else out(`${record.id}  ${record.logicId}@${record.version}  ${record.state}${created ? '' : '  (already started with this key)'}\n`);
  },

  async send(client, args, usage, asJson) {
    const [type] = positionals(args, usage, 1);
    const key = flag(args, 'key');
    if (key === undefined || key === '') throw new UsageError(`--key is required (the same key never starts anything twice): ${usage}`);
    const payload = await jsonFlag(args, 'payload');
    const res = await client.ingestEvent({ type: type!, idempotencyKey: key, ...(payload === undefined ? {} : { payload: payload as never }) });
    if (asJson) json(res);
    else if (!res.matched) out(`recorded; no trigger listens to ${type} or none reached an instance: nothing started or delivered\n`);
    else {
      if (!res.created) out('already sent with this key; what it did then:\n');
      if (res.ids.length > 0) out(`started: ${res.ids.join(' ')}\n`);
      for (const d of res.delivered) out(`${d.status}: ${d.message} → ${d.workflowId}${d.code === undefined ? '' : ` (${d.code})`}\n`);
    }
  },

  async versions(client, args, usage, asJson) {
    if (args.positionals.length > 1) throw new UsageError(`usage: ${usage}`);
    const only = args.positionals[0];
    const items = (await client.listVersions()).filter((v) => only === undefined || v.logicId === only);
    if (asJson) json({ items });
    else out(table(items, ['logicId', 'version', 'active', 'inFlight', 'publishedAt', 'hash']));
  },

  async handlers(client, args, usage, asJson) {
    if (args.positionals.length > 0) throw new UsageError(`usage: ${usage}`);
    const handler = flag(args, 'handler');
    const path = flag(args, 'path');
    const report = await client.handlerUsage({ ...(handler === undefined ? {} : { handler }), ...(path === undefined ? {} : { path }) });
    if (asJson) {
      json(report);
      return;
    }
    const lines: string[] = [];
    for (const h of report.items) {
      lines.push(`${h.handler}: ${h.reason}`);
      for (const p of h.paths) {
        lines.push(`  ${p.methods.join('|')} ${p.path}: ${p.reason}`);
        for (const v of p.versions) {
          const live = Object.entries(v.live).map(([state, n]) => `${n} ${state}`).join(', ') || 'none live';
          lines.push(`    ${v.logicId}@${v.version} ${v.active ? 'active' : 'retired'}, from ${v.calledFrom.join(', ')}; ${live}`);
          for (const g of v.groups) lines.push(`      ${g.count} ${g.state ?? ''}${g.currentStep === null ? '' : ` at ${g.currentStep}`}: ${REACH[g.reach]}${g.via === null ? '' : ` (${g.via})`}`);
        }
      }
    }
    if (report.unreadable > 0) lines.push(`(${report.unreadable} version(s) you may not read also call these; they count in every answer)`);
    out(lines.length === 0 ? 'no version calls a handler matching that\n' : `${lines.join('\n')}\n`);
  },

  retire: (client, args, usage, asJson) => setActive(client, args, usage, asJson, false),
  reactivate: (client, args, usage, asJson) => setActive(client, args, usage, asJson, true),
};

/** How a group of live instances reaches a handler path, as `s8flow handlers` prints it (contracts/api/handlers.ts). */
const REACH: Record<HandlerReach, string> = {
  at: 'calls it at this step',
  ahead: 'its path reaches a call of it',
  compensation: 'would call it unwinding',
  ungrouped: 'past the report\'s group limit, counted as calling it',
  passed: 'past every call of it',
};

async function setActive(client: FlowClient, args: Args, usage: string, asJson: boolean, active: boolean): Promise<void> {
  const [logicId, raw] = positionals(args, usage, 2);
  const v = await client.setVersionActive(logicId!, versionArg(raw, usage), active);
  if (asJson) json(v);
  else out(`${v.logicId}@${v.version} ${v.active ? 'active: new starts use it' : 'retired: new starts are refused'}; ${v.inFlight} in flight\n`);
}
