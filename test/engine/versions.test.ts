import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { type Db, openDb } from '../../engine/store/db.ts';
import { asScheduler, inEnv } from '../../engine/store/tx.ts';
import { makeLogic } from '../contracts/helpers.ts';
import { buildTestModules, type BuiltTestModules } from '../host-functions/helpers/test-modules.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

const ENV = 'versions-env';
const OTHER = 'versions-other';
const APPROVER = { subject: 'alice', scopes: ['flow:decide'] };

describeEachDriver('versions and modules in the database', (getDb, driver) => {
  let svc: FakeService;
  let built: BuiltTestModules;
  let engine: Engine;
  let wasm: Uint8Array;
  let hash: string;
  beforeAll(async () => {
    built = await buildTestModules(['one-call']);
    hash = built.hash['one-call']!;
    wasm = new Uint8Array(await readFile(join(built.dir, 'modules', `${hash}.wasm`)));
    svc = await new FakeService().on('/lookup', (r) => ({ status: 200, body: { seen: (r.body as { account: string }).account } })).listen();
    engine = new Engine({ db: getDb(), env: ENV, executors: { handlers: new Map([['TEST', { url: svc.url }]]) } });
  }, 120_000);
  afterAll(async () => {
    await engine.close();
    await svc.close();
    await built.cleanup();
  });

  const count = async (table: string) =>
    Number((await asScheduler(getDb(), (c) => c.query<{ n: string }>(`SELECT count(*) AS n FROM ${table}`))).rows[0]!.n);
  const withModule = (): LogicVersion =>
    uniqueLogic({
      start: 'score',
      modules: { risk: { sha256: hash, imports: { lookup: { path: '/lookup' } } } },
      steps: { score: { kind: 'func', module: 'risk', input: '{ "account": input.account }' } },
    });
  const parked = (version = 1, logicId?: string): LogicVersion => {
    const doc = uniqueLogic({ version, start: 'ask', steps: { ask: { kind: 'decision', options: ['go'] } } });
    return logicId === undefined ? doc : reId(doc, logicId);
  };

  it('publishes a version as new, then unchanged by hash, and refuses another hash under the same version', async () => {
    const doc = parked();
    expect(await engine.publishVersion(ENV, doc)).toEqual({ status: 'new', logicId: doc.logicId, version: 1, hash: doc.hash });
    expect(await engine.publishVersion(ENV, doc)).toMatchObject({ status: 'unchanged', hash: doc.hash });
    const changed = reId({ ...doc, description: 'changed' }, doc.logicId);
    await expect(engine.publishVersion(ENV, changed)).rejects.toMatchObject({ code: 'FLOW_VERSION_CONFLICT', status: 409 });
  });

  it('refuses a module whose bytes do not hash to its key, and a version naming a module not stored, storing nothing', async () => {
    const before = { modules: await count('modules'), versions: await count('logic_versions') };
    const doc = withModule();
    const wrongKey = 'f'.repeat(64);
    await expect(engine.publishVersion(ENV, doc, { [wrongKey]: wasm, [hash]: wasm })).rejects.toMatchObject({
      code: 'FLOW_MODULE_HASH_MISMATCH',
      status: 422,
    });
    await expect(engine.publishVersion(ENV, doc)).rejects.toMatchObject({ code: 'FLOW_MODULE_MISSING', status: 422 });
    expect({ modules: await count('modules'), versions: await count('logic_versions') }).toEqual(before);
  });

  it('refuses a module a step could never load: not wasm, or importing a host function the version does not declare', async () => {
    const before = await count('modules');
    const garbage = new TextEncoder().encode('not wasm at all');
    const garbageHash = createHash('sha256').update(garbage).digest('hex');
    const notWasm = uniqueLogic({ start: 's', modules: { m: { sha256: garbageHash, imports: {} } }, steps: { s: { kind: 'func', module: 'm' } } });
    await expect(engine.publishVersion(ENV, notWasm, { [garbageHash]: garbage })).rejects.toMatchObject({ code: 'FLOW_MODULE_INVALID', status: 422 });
    const undeclared = uniqueLogic({ start: 's', modules: { m: { sha256: hash, imports: {} } }, steps: { s: { kind: 'func', module: 'm' } } });
    await expect(engine.publishVersion(ENV, undeclared, { [hash]: wasm })).rejects.toMatchObject({
      code: 'FLOW_MODULE_INVALID',
      message: expect.stringContaining('lookup'),
    });
    expect(await count('modules')).toBe(before);
  });

  it('a module stored in one env does not serve a version published in another', async () => {
    const doc = withModule();
    expect((await engine.publishVersion(ENV, doc, { [hash]: wasm })).status).toBe('new');
    // stored now in ENV: a second version there needs no upload
    expect((await engine.publishVersion(ENV, withModule())).status).toBe('new');
    await expect(engine.publishVersion(OTHER, withModule())).rejects.toMatchObject({ code: 'FLOW_MODULE_MISSING' });
  });

  it('a version published through one engine runs on another engine sharing the database, module loaded from it', async () => {
    const doc = withModule();
    await engine.publishVersion(ENV, doc, { [hash]: wasm });
    // another node: its own pool on Postgres (PGlite has one session, so the handle is shared)
    const otherDb: Db = driver === 'postgres' ? await openDb(process.env['DATABASE_URL'], { schema: getDb().schema }) : getDb();
    const nodeB = new Engine({ db: otherDb, env: ENV, executors: { handlers: new Map([['TEST', { url: svc.url }]]) } });
    try {
      const { id } = await nodeB.start({ logicId: doc.logicId, input: { account: 'acc-b' }, env: ENV });
      await settle(nodeB);
      const record = await nodeB.get(id, ENV);
      expect(record.state).toBe('completed');
      expect(record.output).toEqual({ response: { seen: 'acc-b' } });
    } finally {
      await nodeB.close();
      if (otherDb !== getDb()) await otherDb.close();
    }
  });

  it('lists and shows versions with active flag, in-flight count, publication time and diagram; absent or other env is 404', async () => {
    const doc = parked();
    await engine.publishVersion(ENV, doc);
    const { id } = await engine.start({ logicId: doc.logicId, input: {}, env: ENV });
    await settle(engine);
    const shown = await engine.getVersion(ENV, doc.logicId, 1);
    expect(shown).toMatchObject({ logicId: doc.logicId, version: 1, hash: doc.hash, active: true, inFlight: 1, logicVersion: doc });
    expect(new Date(shown.publishedAt).getTime()).not.toBeNaN();
    expect(shown.diagram.split('\n').slice(0, 2)).toEqual(['flowchart TD', `  %% ${doc.logicId}@1 ${doc.hash}`]);
    const listed = (await engine.listVersions(ENV)).find((v) => v.logicId === doc.logicId);
    expect(listed).toEqual({ logicId: doc.logicId, version: 1, hash: doc.hash, active: true, inFlight: 1, publishedAt: shown.publishedAt });
    expect((await engine.listVersions(OTHER)).some((v) => v.logicId === doc.logicId)).toBe(false);

    await engine.resume(id, { step: 'ask', option: 'go', approver: APPROVER }, { env: ENV });
    await settle(engine);
    expect((await engine.getVersion(ENV, doc.logicId, 1)).inFlight).toBe(0);

    for (const call of [
      () => engine.getVersion(OTHER, doc.logicId, 1),
      () => engine.getVersion(ENV, doc.logicId, 2),
      () => engine.setVersionActive(OTHER, doc.logicId, 1, false),
      () => engine.setVersionActive(ENV, 'no.such.flow', 1, false),
    ]) {
      await expect(call()).rejects.toMatchObject({ code: 'FLOW_NOT_FOUND', status: 404 });
    }
    expect((await engine.getVersion(ENV, doc.logicId, 1)).active).toBe(true);
  });

  it('retiring drains: no new start on the version, unversioned starts take the highest active one, running ones finish', async () => {
    const v1 = parked(1);
    const v2 = parked(2, v1.logicId);
    await engine.publishVersion(ENV, v1);
    await engine.publishVersion(ENV, v2);
    const running = await engine.start({ logicId: v1.logicId, version: 2, input: {}, env: ENV });
    await settle(engine);

    expect(await engine.setVersionActive(ENV, v1.logicId, 2, false)).toMatchObject({ active: false, inFlight: 1 });
    await expect(engine.start({ logicId: v1.logicId, version: 2, input: {}, env: ENV })).rejects.toMatchObject({
      code: 'FLOW_VERSION_RETIRED',
      status: 409,
    });
    const unversioned = await engine.start({ logicId: v1.logicId, input: {}, env: ENV });
    expect((await engine.get(unversioned.id, ENV)).version).toBe(1);

    await engine.resume(running.id, { step: 'ask', option: 'go', approver: APPROVER }, { env: ENV });
    await settle(engine);
    expect(await engine.get(running.id, ENV)).toMatchObject({ state: 'completed', version: 2 });

    await engine.setVersionActive(ENV, v1.logicId, 1, false);
    await expect(engine.start({ logicId: v1.logicId, input: {}, env: ENV })).rejects.toMatchObject({ code: 'FLOW_VERSION_RETIRED' });
    expect(await engine.setVersionActive(ENV, v1.logicId, 2, true)).toMatchObject({ active: true });
    expect((await engine.get((await engine.start({ logicId: v1.logicId, input: {}, env: ENV })).id, ENV)).version).toBe(2);
  });

  it('an event starts the highest active version of a trigger, and nothing when every version is retired', async () => {
    const type = `versions.event.${Math.random().toString(36).slice(2)}`;
    const trigger = { triggers: [{ event: type, input: '{}' }] };
    const v1 = uniqueLogic({ ...trigger, start: 'go', steps: { go: { kind: 'pass' } } });
    const v2 = reId(uniqueLogic({ ...trigger, version: 2, start: 'go', steps: { go: { kind: 'pass' } } }), v1.logicId);
    await engine.publishVersion(ENV, v1);
    await engine.publishVersion(ENV, v2);
    await engine.setVersionActive(ENV, v1.logicId, 2, false);
    const first = await engine.ingestEvent({ type, idempotencyKey: 'e-1', env: ENV, payload: {} });
    expect(await Promise.all(first.ids.map(async (id) => (await engine.get(id, ENV)).version))).toEqual([1]);
    await engine.setVersionActive(ENV, v1.logicId, 1, false);
    expect((await engine.ingestEvent({ type, idempotencyKey: 'e-2', env: ENV, payload: {} })).ids).toEqual([]);
  });

  it('the tenant role may flip a version active, but never rewrite a published document or module', async () => {
    const doc = parked();
    await engine.publishVersion(ENV, doc);
    await expect(inEnv(getDb(), ENV, (c) => c.query(`UPDATE logic_versions SET doc = '{}' WHERE logic_id = $1`, [doc.logicId]))).rejects.toMatchObject({
      code: '42501',
    });
    await expect(inEnv(getDb(), ENV, (c) => c.query(`UPDATE modules SET bytes = '\\x00'`))).rejects.toMatchObject({ code: '42501' });
    await expect(inEnv(getDb(), ENV, (c) => c.query(`DELETE FROM modules`))).rejects.toMatchObject({ code: '42501' });
  });
});

/** The same document under another logicId (and version), with its hash recomputed. */
function reId(doc: LogicVersion, logicId: string): LogicVersion {
  const { hash: _hash, ...rest } = doc;
  return makeLogic({ ...rest, logicId });
}
