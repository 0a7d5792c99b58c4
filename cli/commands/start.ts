import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { FlowError } from '../../contracts/errors.ts';
import { engineOptionsFrom, loadConfig } from '../../engine/config.ts';
import { artifactModules, publishOrder, readArtifactDir } from '../../engine/runtime/artifacts.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { openDb } from '../../engine/store/db.ts';
import { migrate } from '../../engine/store/migrate.ts';
import { flag, intFlag, parseArgs } from '../args.ts';

const BIN = fileURLToPath(new URL('../../bin/s8flow.mjs', import.meta.url));

/**
 * Runs engine workers against DATABASE_URL (the environment is read once, by `loadConfig`) until SIGTERM/SIGINT. `--workers N` starts N worker
 * processes (each with a pool of `--concurrency` instances); any number of these, on any number
 * of machines, can share one Postgres: claims use SKIP LOCKED and every write is fenced.
 */
export async function startCommand(argv: string[]): Promise<number> {
  const args = parseArgs(argv);
  const config = loadConfig();
  const url = config.databaseUrl;
  if (url === undefined) {
    throw new FlowError('CLI_NO_DATABASE', 'set DATABASE_URL=postgres://… for s8flow start (s8flow run uses an embedded store)');
  }
  const workers = intFlag(args, 'workers', 1);
  if (workers > 1) return supervise(workers, argv.filter((a, i) => a !== '--workers' && argv[i - 1] !== '--workers'));

  const concurrency = intFlag(args, 'concurrency', 16);
  const db = await openDb(url, { schema: config.schema, poolSize: concurrency + 4 });
  const env = flag(args, 'env') ?? config.env;
  const artifacts = flag(args, 'artifacts');
  const engine = new Engine(
    engineOptionsFrom(config, db, {
      env,
      worker: { concurrency, leaseMs: intFlag(args, 'lease-ms', 30_000), pollMs: intFlag(args, 'poll-ms', 250) },
      observer: { onError: (id, err) => process.stderr.write(`error${id ? ` in ${id}` : ''}: ${(err as Error).message}\n`) },
    }),
  );
  await migrate(db);
  // an artifact directory is published into the database, modules included: every node runs it
  if (artifacts !== undefined) {
    for (const doc of publishOrder(await readArtifactDir(artifacts))) await engine.publishVersion(env, doc, await artifactModules(artifacts, doc));
  }
  await engine.workers.start();
  process.stdout.write(`s8flow: worker ${process.pid} ready (concurrency ${concurrency})\n`);

  await new Promise<void>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  await engine.close();
  await db.close();
  return 0;
}

/** Starts `n` single-process workers and passes signals on; exits when all have. */
async function supervise(n: number, argv: string[]): Promise<number> {
  const children = Array.from({ length: n }, () => fork(BIN, ['start', ...argv], { stdio: 'inherit' }));
  const stop = () => {
    for (const c of children) c.kill('SIGTERM');
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  const codes = await Promise.all(children.map((c) => new Promise<number>((resolve) => c.once('exit', (code) => resolve(code ?? 1)))));
  return Math.max(...codes);
}
