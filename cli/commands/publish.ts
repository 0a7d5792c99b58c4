import { resolve } from 'node:path';
import { PublishError } from '../../compiler/errors.ts';
import { publish } from '../../compiler/publish.ts';
import { flag, parseArgs, UsageError } from '../args.ts';

export const PUBLISH_USAGE = 's8flow publish --to <dir> [--from dist/flow]';

/**
 * `s8flow publish`: copies compiled artifacts into an engine's artifact directory, idempotently by
 * hash. Exit code 0 when everything is published (or already was), 1 when refused
 * (`PUBLISH_VERSION_CONFLICT`: same logicId@version with another hash; nothing is copied).
 */
export async function publishCommand(argv: string[]): Promise<number> {
  const args = parseArgs(argv);
  const to = flag(args, 'to');
  if (to === undefined || args.positionals.length > 0) throw new UsageError(`usage: ${PUBLISH_USAGE}`);
  try {
    const result = await publish({ from: resolve(flag(args, 'from') ?? 'dist/flow'), to: /^[a-z]+:\/\//i.test(to) ? to : resolve(to) });
    const lines = [`published to ${result.target}`];
    for (const key of result.published) lines.push(`  + ${key}`);
    for (const key of result.unchanged) lines.push(`  = ${key} (already published, same hash)`);
    if (result.modules.length > 0) lines.push(`  + ${result.modules.length} module(s)`);
    process.stdout.write(`${lines.join('\n')}\n`);
    return 0;
  } catch (err) {
    if (!(err instanceof PublishError)) throw err;
    process.stderr.write(`s8flow publish: ${err.message} [${err.code}]\n`);
    return 1;
  }
}
