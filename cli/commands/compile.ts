import { relative, resolve } from 'node:path';
import { type CompileResult, compile, formatDiagnostic, watch } from '../../compiler/index.ts';
import { CompileError } from '../../compiler/errors.ts';
import { flag, parseArgs, UsageError } from '../args.ts';

export const COMPILE_USAGE = 's8flow compile [dir] [--out dist/flow] [--watch] [--update-lock] [--lock flow.lock.json]';

/**
 * `s8flow compile`: compiles every exported workflow under `dir` (default: the current directory)
 * into LogicVersion artifacts. Exit code 0 on success, 1 on compile errors (each printed as
 * `file:line:col - COMPILE_…: message`), 2 on usage errors. `--watch` recompiles on change until
 * interrupted.
 */
export async function compileCommand(argv: string[]): Promise<number> {
  const args = parseArgs(argv, ['watch', 'update-lock']);
  if (args.positionals.length > 1) throw new UsageError(`usage: ${COMPILE_USAGE}`);
  const root = resolve(args.positionals[0] ?? '.');
  const out = flag(args, 'out');
  const lockPath = flag(args, 'lock');
  const options = {
    root,
    ...(out === undefined ? {} : { out: resolve(out) }),
    ...(lockPath === undefined ? {} : { lockPath: resolve(lockPath) }),
    updateLock: flag(args, 'update-lock') === 'true',
  };
  if (flag(args, 'watch') === 'true') {
    const stop = await watch({
      ...options,
      onResult: (r) => {
        if (r.ok) report(r.value);
        else printErrors(r.error);
      },
    });
    await new Promise<void>((done) => process.once('SIGINT', () => done()));
    await stop();
    return 0;
  }
  try {
    report(await compile(options));
    return 0;
  } catch (err) {
    if (!(err instanceof CompileError)) throw err;
    printErrors(err);
    return 1;
  }
}

function report(result: CompileResult): void {
  const outDir = relative(process.cwd(), result.outDir) || '.';
  const lines = [`compiled ${result.versions.length} workflow version(s) → ${outDir} (${result.written.length} file(s) changed)`];
  for (const v of result.versions) lines.push(`  ${v.doc.logicId}@${v.doc.version}  ${v.doc.hash.slice(0, 19)}…  ${v.source}#${v.exportName}`);
  if (result.lockUpdated) lines.push(`recorded in ${relative(process.cwd(), result.lockPath)}`);
  if (result.unlocked.length > 0) {
    lines.push(`not locked yet: ${result.unlocked.join(', ')} — run \`s8flow compile --update-lock\` and commit flow.lock.json`);
  }
  process.stdout.write(`${lines.join('\n')}\n`);
}

function printErrors(err: CompileError): void {
  process.stderr.write(`${err.diagnostics.map(formatDiagnostic).join('\n')}\ncompile failed: ${err.diagnostics.length} problem(s)\n`);
}
