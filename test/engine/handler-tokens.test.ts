import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { loadHandlerProfiles } from '../../engine/executors/handlers.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { buildTestModules, type BuiltTestModules } from '../host-functions/helpers/test-modules.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

/** Which bearer token each env's calls must carry: its own, or the profile's static one. */
const EXPECTED: Record<string, string> = { 'tenant-a': 'token-for-a', 'tenant.b': 'token-for-b', 'tenant-c': 'static-token' };

describeEachDriver('per-env handler tokens', (getDb) => {
  let svc: FakeService;
  let built: BuiltTestModules;
  let engine: Engine;
  beforeAll(async () => {
    built = await buildTestModules(['one-call']);
    svc = await new FakeService()
      .on('/reserve', () => ({ status: 200, body: { reserved: true } }))
      .on('/release', () => ({ status: 200, body: { released: true } }))
      .on('/lookup', () => ({ status: 200, body: { ok: true } }))
      .listen();
    const handlers = loadHandlerProfiles({
      FLOW_HANDLER_LEDGER_URL: svc.url,
      FLOW_HANDLER_LEDGER_TOKEN: 'static-token',
      FLOW_HANDLER_LEDGER_TOKEN__TENANT_A: 'token-for-a',
      FLOW_HANDLER_LEDGER_TOKEN__TENANT_B: 'token-for-b',
    });
    engine = new Engine({ db: getDb(), executors: { handlers } });
  }, 120_000);
  afterAll(async () => {
    await engine.close();
    await svc.close();
    await built.cleanup();
  });

  it('proxy, compensation and host calls made for an env carry that env’s token; an env without one gets the static token', async () => {
    const hash = built.hash['one-call']!;
    const logic = uniqueLogic({
      domain: 'ledger',
      start: 'reserve',
      modules: { risk: { sha256: hash, imports: { lookup: { path: '/lookup' } } } },
      steps: {
        reserve: { kind: 'proxy', path: '/reserve', next: 'score', compensate: { kind: 'proxy', path: '/release' } },
        score: { kind: 'func', module: 'risk', input: '{ "account": "x" }', next: 'stop' },
        stop: { kind: 'fail', code: 'STOP' },
      },
    });
    const wasm = await readFile(join(built.dir, 'modules', `${hash}.wasm`));
    const ids = new Map<string, string>();
    for (const env of Object.keys(EXPECTED)) {
      await engine.publishVersion(env, logic, { [hash]: wasm });
      ids.set(env, (await engine.start({ logicId: logic.logicId, input: {}, env })).id);
    }
    await settle(engine);
    for (const [env, id] of ids) {
      expect((await engine.get(id, env)).state).toBe('compensated');
      const calls = svc.received.filter((r) => r.headers['x-flow-workflow-id'] === id);
      expect(calls.map((c) => c.path).sort()).toEqual(['/lookup', '/release', '/reserve']);
      for (const call of calls) expect({ path: call.path, auth: call.headers['authorization'] }).toEqual({ path: call.path, auth: `Bearer ${EXPECTED[env]}` });
    }
  });
});
