import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { FlowError } from '../../contracts/errors.ts';
import { buildApi } from '../../engine/api/server.ts';
import { engineOptionsFrom, loadConfig } from '../../engine/config.ts';
import { artifactModules, publishOrder, readArtifactDir } from '../../engine/runtime/artifacts.ts';
import { M2mError } from '../../engine/executors/errors.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { createLogger } from '../../engine/runtime/log.ts';
import { openDb } from '../../engine/store/db.ts';
import { migrate } from '../../engine/store/migrate.ts';
import { flag, intFlag, parseArgs, UsageError } from '../args.ts';
import { startTelemetry } from '../telemetry.ts';

const BIN = fileURLToPath(new URL('../../bin/s8flow.mjs', import.meta.url));

export const START_USAGE =
  's8flow start [--port N] [--host H] [--no-api] [--no-workers] [--workers N] [--concurrency N] [--artifacts DIR]   (needs DATABASE_URL)';

/**
 * Serves the HTTP API and runs engine workers in one process against DATABASE_URL (the
 * environment is read once, by `loadConfig`) until SIGTERM/SIGINT. `--no-api` and `--no-workers`
 * split the two for separate deployments. `--workers N` starts N processes (the first serves the
 * API); any number of these, on any number of machines, can share one Postgres: claims use SKIP
 * LOCKED and every write is fenced.
 *
 * On SIGTERM the listener stops first (/readyz answers 503, requests in flight finish), then the
 * workers stop claiming and let the attempts they hold commit; an attempt cut off mid-call is
 * left to its lease, and another node takes it over when the lease runs out.
 */
export async function startCommand(argv: string[]): Promise<number> {
  const args = parseArgs(argv, ['no-api', 'no-workers']);
  if (args.positionals.length > 0) throw new UsageError(`usage: ${START_USAGE}`);
  const config = loadConfig();
  const url = config.databaseUrl;
  if (url === undefined) {
    throw new FlowError('CLI_NO_DATABASE', 'set DATABASE_URL=postgres://… for s8flow start (s8flow run uses an embedded store)');
  }
  const serveApi = flag(args, 'no-api') === undefined;
  const runWorkers = flag(args, 'no-workers') === undefined;
  if (!serveApi && !runWorkers) throw new UsageError('--no-api and --no-workers together leave nothing to run');
  const workers = intFlag(args, 'workers', 1);
  if (workers > 1) return supervise(workers, argv.filter((a, i) => a !== '--workers' && argv[i - 1] !== '--workers'));

  // traces over OTLP/HTTP when OTEL_* asks for them (cli/telemetry.ts); otherwise nothing is loaded
  const telemetry = await startTelemetry();
  const concurrency = intFlag(args, 'concurrency', 16);
  const db = await openDb(url, { schema: config.schema, poolSize: concurrency + 4, ...(config.databaseListenUrl ? { listenUrl: config.databaseListenUrl } : {}) });
  const env = flag(args, 'env') ?? config.env;
  const artifacts = flag(args, 'artifacts');
  // the engine's structured lines (failures, retries, dead letters, compensations, lost leases) on stderr
  const logger = createLogger({ level: process.env['LOG_LEVEL'] ?? 'info', destination: process.stderr });
  const engine = new Engine(
    engineOptionsFrom(config, db, {
      env,
      worker: { concurrency, leaseMs: intFlag(args, 'lease-ms', 30_000), pollMs: intFlag(args, 'poll-ms', 250) },
      logger,
    }),
  );
  // built before the database is touched: a missing auth key stops boot with nothing changed; what
  // the API does on its own (resuming bulk jobs) waits for the migration
  let migrated: () => void = () => {};
  const databaseReady = new Promise<void>((resolve) => {
    migrated = resolve;
  });
  const api = serveApi
    ? await buildApi({
        engine,
        auth: { secret: config.auth.secret, jwks: config.auth.jwksUrl, issuer: config.auth.issuer, audience: config.auth.audience, production: config.production },
        metricsOpen: config.metricsOpen,
        logger: { level: process.env['LOG_LEVEL'] ?? 'info' },
        console: { databaseReady },
      })
    : null;
  await migrate(db);
  migrated();
  // handler identities that register (RFC 7591) do it now: a refused registration stops boot; an
  // authorization server out of reach does not, the first call that needs the client registers
  await engine.identities.prepare().catch((err: unknown) => {
    if (!(err instanceof M2mError && err.retryable)) throw err;
    logger.warn({ code: err.code, error: err.message }, 'client registration deferred to the first call');
  });
  // an artifact directory is published into the database, modules included: every node runs it
  if (artifacts !== undefined) {
    for (const doc of publishOrder(await readArtifactDir(artifacts))) await engine.publishVersion(env, doc, await artifactModules(artifacts, doc));
  }
  if (api !== null) {
    const app = api.app;
    const port = flag(args, 'port') === undefined ? config.listen.port : Number(flag(args, 'port'));
    if (!Number.isInteger(port) || port < 0 || port > 65535) throw new UsageError(`--port takes 0–65535, not ${flag(args, 'port')}`);
    const address = await app.listen({ host: flag(args, 'host') ?? config.listen.host, port });
    process.stdout.write(`s8flow: API listening on ${address}\n`);
  }
  if (runWorkers) {
    await engine.workers.start();
    // every worker node schedules retention; the advisory lock lets one run at a time
    engine.retention.schedule();
    process.stdout.write(`s8flow: worker ${process.pid} ready (concurrency ${concurrency})\n`);
  }

  await new Promise<void>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  logger.info('shutting down');
  await api?.close();
  await engine.close();
  await db.close();
  await telemetry?.shutdown();
  return 0;
}

/** Starts `n` processes, the first serving the API, and passes signals on; exits when all have. */
async function supervise(n: number, argv: string[]): Promise<number> {
  const children = Array.from({ length: n }, (_, i) => fork(BIN, ['start', ...argv, ...(i > 0 ? ['--no-api'] : [])], { stdio: 'inherit' }));
  const stop = () => {
    for (const c of children) c.kill('SIGTERM');
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  const codes = await Promise.all(children.map((c) => new Promise<number>((resolve) => c.once('exit', (code) => resolve(code ?? 1)))));
  return Math.max(...codes);
}
