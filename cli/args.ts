import { FlowError } from '../contracts/errors.ts';

/** Parsed command line: positionals, and flags (repeatable ones collect every value). */
export interface Args {
  positionals: string[];
  flags: Map<string, string[]>;
}

export class UsageError extends FlowError {
  constructor(message: string) {
    super('CLI_USAGE', message, { status: 2 });
  }
}

/** `--name value`, `--name=value` and boolean `--name` (when listed in `booleans`). */
export function parseArgs(argv: string[], booleans: readonly string[] = []): Args {
  const positionals: string[] = [];
  const flags = new Map<string, string[]>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--')) {
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const name = arg.slice(2, eq < 0 ? undefined : eq);
    let value: string;
    if (eq >= 0) value = arg.slice(eq + 1);
    else if (booleans.includes(name)) value = 'true';
    else {
      const next = argv[++i];
      if (next === undefined) throw new UsageError(`--${name} needs a value`);
      value = next;
    }
    flags.set(name, [...(flags.get(name) ?? []), value]);
  }
  return { positionals, flags };
}

export function flag(a: Args, name: string): string | undefined {
  return a.flags.get(name)?.at(-1);
}

export function intFlag(a: Args, name: string, fallback: number): number {
  const v = flag(a, name);
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new UsageError(`--${name} takes a whole number >= 1, not ${v}`);
  return n;
}
