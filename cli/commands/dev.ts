import { mkdirSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { CompileResult } from '../../compiler/session.ts';
import { FlowError } from '../../contracts/errors.ts';
import { buildApi } from '../../engine/api/server.ts';
import { engineOptionsFrom, loadConfig } from '../../engine/config.ts';
import { artifactModules, publishOrder } from '../../engine/runtime/artifacts.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { openDb } from '../../engine/store/db.ts';
import { migrate } from '../../engine/store/migrate.ts';
import { flag, intFlag, parseArgs, UsageError } from '../args.ts';
import { devAuthSecret, mintToken } from '../dev-token.ts';

export const DEV_USAGE = 's8flow dev [dir] [--port 4300] [--host 127.0.0.1] [--state .flow]';

const say = (s: string) => process.stdout.write(`${s}\n`);

export interface DevHandle {
  url: string;
  /**
   * A development token: `flow:admin` and every approver scope the published versions declare.
   * Minted again when a build brings a new approver scope, so read it after `firstBuild`.
   */
  readonly token: string;
  app: FastifyInstance;
  engine: Engine;
  /** Resolves when the first build is compiled and published. */
  firstBuild: Promise<void>;
  /** Resolves after the next compile-and-publish round; tests wait on it. */
  published: () => Promise<void>;
  close(): Promise<void>;
}

/**
 * `s8flow dev`: one process with the embedded store (PGlite, file-backed under `--state`, so state
 * survives restarts; delete the folder to reset), the compiler watching `dir`, the workers, the
 * API and the console on one port. Every good build is published (the version lock and the
 * engine's hash check are the gate); a broken one prints `file:line:col` and the last good build
 * keeps running.
 */
export function devCommand(argv: string[]): Promise<number> {
  return runDev(argv);
}

/** `s8flow dev` with a hook run once the first build is published (`npm run dev` starts one instance per example there). */
export async function runDev(argv: string[], hooks: { afterFirstBuild?: (dev: DevHandle) => Promise<void> } = {}): Promise<number> {
  const args = parseArgs(argv);
  if (args.positionals.length > 1) throw new UsageError(`usage: ${DEV_USAGE}`);
  const dev = await startDev({
    root: resolve(args.positionals[0] ?? '.'),
    stateDir: resolve(flag(args, 'state') ?? '.flow'),
    host: flag(args, 'host') ?? '127.0.0.1',
    port: intFlag(args, 'port', 4300),
  });
  say(`\n  console  ${dev.url}/ui/   (signs in by itself)`);
  say(`  API      ${dev.url}/v1/envs/${dev.engine.env}/…   OpenAPI ${dev.url}/openapi.json\n`);
  // the token carries the approver scopes the build declares: print it once the build is in
  await dev.firstBuild;
  say(tokenLines(dev.url, dev.token));
  await hooks.afterFirstBuild?.(dev);
  await new Promise<void>((done) => {
    process.once('SIGINT', done);
    process.once('SIGTERM', done);
  });
  await dev.close();
  return 0;
}

export async function startDev(o: { root: string; stateDir: string; host: string; port: number; log?: (s: string) => void }): Promise<DevHandle> {
  const log = o.log ?? say;
  const config = loadConfig();
  if (config.production) throw new FlowError('CLI_DEV_IN_PRODUCTION', 's8flow dev is for development: unset NODE_ENV=production, or use s8flow start');
  mkdirSync(o.stateDir, { recursive: true });
  const secret = devAuthSecret(o.stateDir);
  const db = await openDb(join(o.stateDir, 'pglite'));
  await migrate(db);
  const engine = new Engine(
    engineOptionsFrom(config, db, {
      worker: { concurrency: 8, pollMs: 100 },
      observer: { onError: (id, err) => log(`error${id ? ` in ${id}` : ''}: ${(err as Error).message}`) },
    }),
  );
  await engine.workers.start();

  // the token grants every flow scope and every approver scope the published versions declare
  const approverScopes = new Set<string>();
  const devToken = () =>
    mintToken(secret, { sub: 'developer', envs: ['*'], scope: ['flow:admin', ...approverScopes].join(' ') });

  const artifacts = join(o.stateDir, 'artifacts');
  let round: Promise<void> = Promise.resolve();
  let roundDone: () => void = () => {};
  let nextRound = new Promise<void>((r) => {
    roundDone = r;
  });
  let token = '';
  let built = false;
  const publish = async (result: CompileResult) => {
    const scopesBefore = approverScopes.size;
    for (const doc of publishOrder(result.versions.map((v) => v.doc))) {
      for (const step of Object.values(doc.steps)) if (step.kind === 'decision' && step.approverScope) approverScopes.add(step.approverScope);
      const source = result.versions.find((v) => v.doc === doc)?.source ?? '?';
      try {
        const r = await engine.publishVersion(engine.env, doc, await artifactModules(artifacts, doc));
        if (r.status === 'new') {
          log(`published ${doc.logicId}@${doc.version}  ${doc.hash.slice(0, 19)}…  (${source})`);
          // its declared schedules are live now: say when each fires next
          for (const s of (await engine.schedules.list(engine.env)).filter((x) => x.logicId === doc.logicId)) {
            log(`  schedule ${s.id}  ${s.cron} ${s.timezone}  next ${s.nextAt?.toISOString() ?? '-'}${s.paused ? '  (paused)' : ''}`);
          }
        }
      } catch (err) {
        if (!(err instanceof FlowError)) throw err;
        // the engine's gate: this version number already names another definition
        log(`${source} - ${err.code}: ${err.message}\n  the last good build keeps running; give the changed workflow a new version`);
      }
    }
    if (approverScopes.size === scopesBefore) return;
    token = await devToken();
    if (built) log(`a new approver scope: the token now carries ${[...approverScopes].join(', ')}\n${tokenLines(address, token)}`);
  };

  // serve first: the console answers while the first compile (seconds, type checking) runs
  const api = await buildApi({ engine, auth: { secret, production: false }, console: { devToken } });
  const app = api.app;
  const address = await app.listen({ host: o.host, port: o.port });
  token = await devToken();
  // the compiler (ts-morph, TypeScript) loads after the listener is up: seconds the console need not wait
  const { formatDiagnostic, watch } = await import('../../compiler/index.ts');
  const watching = watch({
    root: o.root,
    out: artifacts,
    onResult: (r) => {
      round = round.then(async () => {
        if (r.ok) await publish(r.value);
        else {
          log(r.error.diagnostics.map(formatDiagnostic).join('\n'));
          log(`compile failed: ${r.error.diagnostics.length} problem(s); the last good build keeps running`);
        }
        const done = roundDone;
        nextRound = new Promise<void>((res) => {
          roundDone = res;
        });
        done();
      });
    },
  });
  const firstBuild = watching.then(() => round).then(() => {
    built = true;
  });
  log(`s8flow dev: ${relative(process.cwd(), o.root) || '.'} → state in ${relative(process.cwd(), o.stateDir) || '.'} (delete it to reset)`);
  return {
    url: address,
    get token() {
      return token;
    },
    app,
    engine,
    firstBuild,
    published: () => nextRound,
    async close() {
      await (await watching)();
      await round;
      await api.close();
      await engine.close();
      await db.close();
    },
  };
}

function tokenLines(url: string, token: string): string {
  return `  token    ${token}\n           export FLOW_URL=${url} FLOW_TOKEN=${token}\n`;
}
