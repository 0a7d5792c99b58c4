import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { type Browser, chromium, type Page } from 'playwright-core';
import { type LogicVersion, logicVersionHash, LOGIC_VERSION_SCHEMA } from '../../contracts/index.ts';
import { type Api, buildApi } from '../../engine/api/server.ts';
import { artifactModules, publishOrder, readArtifactDir } from '../../engine/runtime/artifacts.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { type Db, openDb } from '../../engine/store/db.ts';
import { migrate } from '../../engine/store/migrate.ts';
import { type DemoService, startDemoService } from '../../examples/demo-service.ts';
import { mintToken } from '../../cli/dev-token.ts';
import type { FakeService } from '../support/fake-service.ts';

/** Debian's chromium, never a downloaded browser (.ci/run installs it when missing). */
export const CHROMIUM = process.env['FLOW_CHROMIUM'] ?? '/usr/bin/chromium';
export const HAVE_CHROMIUM = existsSync(CHROMIUM);
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

const SECRET = 'ui-test-secret-for-hs256-tokens-0123456789';
const FIXTURES = new URL('../fixtures/compiled/', import.meta.url).pathname;
/** Where screenshots go: FLOW_UI_SCREENSHOTS (docs/images to refresh the committed set), else .tmp/. */
export const SHOTS = process.env['FLOW_UI_SCREENSHOTS'] ?? join(process.cwd(), '.tmp/ui-screenshots');

export function logic(parts: Partial<LogicVersion> & Pick<LogicVersion, 'steps' | 'start' | 'logicId'>): LogicVersion {
  const doc = { schema: LOGIC_VERSION_SCHEMA, version: 1, domain: 'test', input: { type: 'object' }, ...parts, hash: '' } as LogicVersion;
  doc.hash = logicVersionHash(doc as unknown as Record<string, unknown>);
  return doc;
}

export interface ConsoleEnv {
  url: string;
  engine: Engine;
  db: Db;
  /** The test's own owning service (handler TEST). */
  svc: FakeService;
  /** The demo's owning service (handler PAYMENTS), for payments.capture. */
  demo: DemoService;
  browser: Browser;
  /** A page signed in as `sub` (the console's development sign-in, as under s8flow dev). */
  page: Page;
  shot(name: string): Promise<void>;
  /** Mints another token (a different subject or scopes) for the same engine. */
  token(claims: { sub: string; scope: string; envs?: string[] }): Promise<string>;
  close(): Promise<void>;
}

/**
 * A real engine on an in-memory PGlite with its workers, the HTTP API with the console, the demo's
 * owning service and a test service, and chromium showing the console.
 */
export async function startConsoleEnv(o: { sub: string; scope: string; logics?: LogicVersion[]; svc: FakeService }): Promise<ConsoleEnv> {
  const demo = await startDemoService();
  const db = await openDb();
  await migrate(db);
  const engine = new Engine({
    db,
    executors: { handlers: new Map([['PAYMENTS', { url: demo.url }], ['TEST', { url: o.svc.url }]]) },
    worker: { concurrency: 4, pollMs: 50 },
  });
  for (const doc of publishOrder(await readArtifactDir(FIXTURES))) await engine.publishVersion(engine.env, doc, await artifactModules(FIXTURES, doc));
  for (const doc of o.logics ?? []) await engine.publishVersion(engine.env, doc);
  await engine.workers.start();
  const token = () => mintToken(SECRET, { sub: o.sub, envs: ['*'], scope: o.scope });
  const api: Api = await buildApi({ engine, auth: { secret: SECRET, production: false }, console: { devToken: token } });
  const url = await api.app.listen({ host: '127.0.0.1', port: 0 });
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.setDefaultTimeout(60_000);
  mkdirSync(SHOTS, { recursive: true });
  return {
    url,
    engine,
    db,
    svc: o.svc,
    demo,
    browser,
    page,
    token: (c) => mintToken(SECRET, { sub: c.sub, envs: c.envs ?? ['*'], scope: c.scope }),
    shot: async (name) => {
      // transitions finished (the progress bar's), so a shot shows what the page settled on
      await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true, animations: 'disabled' });
    },
    async close() {
      await browser.close();
      await api.close();
      await engine.close();
      await db.close();
      await demo.close();
      await o.svc.close();
    },
  };
}
