import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { createFlowClient, FlowApiError } from '../../client/index.ts';
import { PublishError } from '../../compiler/errors.ts';
import { FlowError } from '../../contracts/errors.ts';
import { publish } from '../../compiler/publish.ts';
import { artifactModules, publishOrder, readArtifactDir } from '../../engine/runtime/artifacts.ts';
import { MAX_REPLAYS } from '../../contracts/api/compatibility.ts';
import { flag, intFlag, parseArgs, UsageError } from '../args.ts';
import { publishCheck } from './publish-check.ts';

export const PUBLISH_USAGE = 's8flow publish --to <dir | http(s)://engine> [--token T] [--env E] [--from dist/flow] [--check [--fail-on unsafe] [--replay K]]';

/**
 * `s8flow publish`: publishes compiled artifacts, idempotently by hash.
 * - `--to http(s)://…` uploads each LogicVersion with its WASM modules through the engine's API
 *   (`--token`, or FLOW_TOKEN), children before their parents, and prints `new`, `unchanged` or
 *   `conflict` per version. Every node of that engine runs them at once. A version refused for doing more
 *   than the token may (FLOW_GRANT_*) gets one line per refusal, naming the missing grant.
 * - `--to <dir>` copies them into an engine's artifact directory.
 * - `--check` (with `--to http(s)://…`) publishes nothing: it prints the compatibility report of
 *   each version against the live instances of the active version below it (publish-check.ts);
 *   `--fail-on unsafe` exits 1 when any report is unsafe; `--replay K` also replays the last K
 *   ended instances of that version on the new one and prints where each would have diverged.
 * Exit code 0 when everything is published (or already was), 1 on any conflict (the same
 * logicId@version with another hash) or refusal.
 */
export async function publishCommand(argv: string[]): Promise<number> {
  const args = parseArgs(argv, ['check']);
  const to = flag(args, 'to');
  if (to === undefined || args.positionals.length > 0) throw new UsageError(`usage: ${PUBLISH_USAGE}`);
  const overHttp = /^https?:\/\//i.test(to);
  const check = flag(args, 'check') === 'true';
  const failOn = flag(args, 'fail-on');
  if (failOn !== undefined && failOn !== 'unsafe') throw new UsageError(`--fail-on takes unsafe, not ${failOn}`);
  if (failOn !== undefined && !check) throw new UsageError('--fail-on goes with --check');
  if (check && !overHttp) throw new UsageError('--check asks a running engine: give --to http(s)://engine');
  if (flag(args, 'replay') !== undefined && !check) throw new UsageError('--replay goes with --check');
  const replay = flag(args, 'replay') === undefined ? 0 : intFlag(args, 'replay', 0);
  if (replay > MAX_REPLAYS) throw new UsageError(`--replay takes at most ${MAX_REPLAYS}, not ${replay}`);
  const token = flag(args, 'token') ?? process.env['FLOW_TOKEN'];
  // a usage error first: it is what the caller fixes before anything else
  if (overHttp && (token === undefined || token === '')) throw new UsageError('--to http(s)://… needs --token T (or FLOW_TOKEN): a JWT with flow:publish');
  const from = resolve(flag(args, 'from') ?? 'dist/flow');
  if (!existsSync(from)) {
    const which = flag(args, 'from') === undefined ? ' (the default --from)' : '';
    throw new FlowError('CLI_NO_ARTIFACTS', `${from}${which} does not exist: run s8flow compile first, or pass --from <the folder it wrote>`);
  }
  if (check) return publishCheck(to, from, token!, flag(args, 'env'), { failOnUnsafe: failOn === 'unsafe', replay });
  if (overHttp) return publishOverHttp(to, from, token!, flag(args, 'env'));
  try {
    const result = await publish({ from, to: /^[a-z]+:\/\//i.test(to) ? to : resolve(to) });
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

/**
 * One request per version, in dependency order. A conflict does not stop the others (each line
 * says what happened to its version), but any conflict or refusal makes the exit code 1.
 */
async function publishOverHttp(baseUrl: string, from: string, token: string, env: string | undefined): Promise<number> {
  const client = createFlowClient({ baseUrl, token, ...(env === undefined ? {} : { env }) });
  let failed = 0;
  for (const doc of publishOrder(await readArtifactDir(from))) {
    const key = `${doc.logicId}@${doc.version}`;
    try {
      const result = await client.publishVersion(doc, await artifactModules(from, doc));
      process.stdout.write(`${result.status.padEnd(9)} ${key} ${result.hash}\n`);
    } catch (err) {
      if (!(err instanceof FlowApiError)) throw err;
      failed++;
      const what = err.code === 'FLOW_VERSION_CONFLICT' ? 'conflict' : 'refused';
      process.stdout.write(`${what.padEnd(9)} ${key} ${doc.hash}\n`);
      process.stderr.write(`s8flow publish: ${key}: ${err.message} [${err.code}]\n`);
      // a grant refusal lists each thing the version may not do, with its code and the missing grant
      for (const e of err.problem?.errors ?? []) process.stderr.write(`  ${key} ${e.path}: ${e.message}\n`);
    }
  }
  return failed === 0 ? 0 : 1;
}
