import { FlowError } from '../contracts/errors.ts';
import { LIFECYCLE_USAGE } from './commands/lifecycle.ts';
import { MIGRATE_USAGE } from './commands/migrate.ts';
import { OPERATE_USAGE } from './commands/operate.ts';
import { HISTORY_USAGE } from './commands/history.ts';
import { RUN_USAGE } from './commands/run-usage.ts';
import { SCHEDULES_USAGE } from './commands/schedules.ts';
import { ApiProblem } from './http.ts';

type Command = (argv: string[]) => Promise<number>;

/** Commands load lazily: `s8flow run` should not pay for the compiler's ts-morph. */
const COMMANDS: Record<string, { usage: string; load: () => Promise<Command> }> = {
  run: { usage: RUN_USAGE, load: async () => (await import('./commands/run.ts')).runCommand },
  start: {
    usage:
      's8flow start [--port N] [--host H] [--no-api] [--no-workers] [--workers N] [--concurrency N] [--artifacts DIR]   (needs DATABASE_URL)',
    load: async () => (await import('./commands/start.ts')).startCommand,
  },
  compile: {
    usage: 's8flow compile [dir] [--out dist/flow] [--watch] [--update-lock]',
    load: async () => (await import('./commands/compile.ts')).compileCommand,
  },
  dev: {
    usage: 's8flow dev [dir] [--port 4300] [--host 127.0.0.1] [--state .flow]   (embedded store, API, workers and console on one port)',
    load: async () => (await import('./commands/dev.ts')).devCommand,
  },
  token: {
    usage: 's8flow token --sub SUBJECT --env ENV [--env ENV]… --scope "flow:read flow:start" [--ttl 1h]   (development only)',
    load: async () => (await import('./commands/token.ts')).tokenCommand,
  },
  trace: {
    usage: 's8flow trace <id> [--env E] [--out file]   (reads DATABASE_URL)',
    load: async () => (await import('./commands/trace.ts')).traceCommand,
  },
  publish: {
    usage: 's8flow publish --to <dir | http(s)://engine> [--token T] [--env E] [--from dist/flow] [--check [--fail-on unsafe] [--replay K]]',
    load: async () => (await import('./commands/publish.ts')).publishCommand,
  },
  schedules: { usage: SCHEDULES_USAGE, load: async () => (await import('./commands/schedules.ts')).schedulesCommand },
  migrate: { usage: MIGRATE_USAGE, load: async () => (await import('./commands/migrate.ts')).migrateCommand },
};

// the operator verbs against a running engine's API (see docs/operations.md)
for (const [name, usage] of Object.entries(OPERATE_USAGE)) {
  COMMANDS[name] = { usage, load: async () => (await import('./commands/operate.ts')).operateCommand(name) };
}

// legal hold, erasure, retention and archives
for (const [name, usage] of Object.entries(HISTORY_USAGE)) {
  COMMANDS[name] = { usage, load: async () => (await import('./commands/history.ts')).historyCommand(name) };
}

// starting instances, sending events and managing versions, through the typed client
for (const [name, usage] of Object.entries(LIFECYCLE_USAGE)) {
  COMMANDS[name] = { usage, load: async () => (await import('./commands/lifecycle.ts')).lifecycleCommand(name) };
}

let quietOnClosedPipe = false;

export async function main(argv: string[]): Promise<number> {
  if (!quietOnClosedPipe) {
    // `s8flow show … | head`: the reader went away; what is left to print has nowhere to go
    quietOnClosedPipe = true;
    process.stdout.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code !== 'EPIPE') throw err;
      process.exit(process.exitCode ?? 0);
    });
  }
  const [name, ...rest] = argv;
  const command = name === undefined ? undefined : COMMANDS[name];
  if (command === undefined) {
    process.stderr.write(`usage:\n${Object.values(COMMANDS).map((c) => `  ${c.usage}`).join('\n')}\n`);
    return name === undefined || name === '--help' ? 0 : 2;
  }
  try {
    return await (await command.load())(rest);
  } catch (err) {
    if (err instanceof ApiProblem) {
      process.stderr.write(`s8flow ${name}: ${err.message} [${err.code}]\n`);
      return err.exitCode;
    }
    if (err instanceof FlowError) {
      process.stderr.write(`s8flow ${name}: ${err.message} [${err.code}]\n`);
      return err.code === 'CLI_USAGE' ? 2 : 1;
    }
    throw err;
  }
}
