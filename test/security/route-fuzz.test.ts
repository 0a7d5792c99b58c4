import { randomUUID } from 'node:crypto';
import { appendFileSync, readFileSync } from 'node:fs';
import fc from 'fast-check';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { LogicVersion } from '../../contracts/index.ts';
import type { Api } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { bearer, parkedLogic, testApi } from '../api/support.ts';
import { describeEachDriver } from '../support/db.ts';
import { settle } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

/**
 * Every route of the API, found from the app itself, fuzzed with hostile path params, query
 * values and JSON bodies (NUL, lone surrogates, huge and odd numbers, long strings, deep JSON,
 * wrong types, dates Postgres cannot hold), with an admin token, a token narrowed to another
 * team's definitions, and none. No answer is a 500, every refusal is problem+json with a
 * code from docs/errors.md, and the other team's token is let into no route of the env.
 */

const ENV = 'fuzz-env';
const SEED = Number(process.env['FUZZ_SEED'] ?? 20261204);
/** At least this many requests; every (route, slot) pair gets four in any case. */
const RUNS = Number(process.env['FUZZ_RUNS'] ?? 300);
const CATALOGUE = new Set([...readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8').matchAll(/`(FLOW_[A-Z0-9_]+)`/g)].map((m) => m[1]!));

const parked = (): LogicVersion => parkedLogic('fz.parked');

const deep = (n: number): unknown => {
  let v: unknown = 1;
  for (let i = 0; i < n; i++) v = i % 2 === 0 ? [v] : { a: v };
  return v;
};
const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');

const HOSTILE_STRINGS = ['\u0000', 'a\u0000b', '\ud800', 'x\udfffy', 'x'.repeat(5000), '99999999999', '1e308', '-0', 'NaN', '%00', '𝒳 ünï ☃ \u202e', '', '../../etc/passwd'];
const HOSTILE_DATES = ['0000-01-01T00:00:00Z', '-200000-01-01T00:00:00Z', '+275760-09-13T00:00:00Z', '2024-02-30T00:00:00Z', '9999-12-31T23:59:59Z', '2024-99-99T99:99:99Z'];
const HOSTILE_CURSORS = ['2024-99-99T99:99:99.000000Z', '0000-01-01T00:00:00.000000Z', '2024-02-30T00:00:00.000000Z', '2024-01-01T00:00:00.000000Z'].map((createdAt) => b64({ createdAt, id: randomUUID() }));
const HOSTILE_NUMBERS = [1e308, -1e308, -0, 99999999999, 2 ** 31, -(2 ** 31) - 1, Number.MAX_SAFE_INTEGER + 2, 1.5, -1, 0];
const HOSTILE_JSON: unknown[] = [deep(2500), deep(60), { '\u0000': 1 }, ['\ud800'], { a: 'x'.repeat(20000) }, { a: 'b\u0000' }, null, [], {}, true];
const hostileJson: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(...HOSTILE_STRINGS),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom<unknown>(...HOSTILE_NUMBERS, ...HOSTILE_JSON),
  fc.jsonValue({ maxDepth: 3 }),
);

/** Full paths of the routes fastify has, from its printed tree (commonPrefix off: one segment per node). */
function routesOf(printed: string): { path: string; methods: string[] }[] {
  const out: { path: string; methods: string[] }[] = [];
  const stack: string[] = [];
  for (const line of printed.split('\n')) {
    const m = /^([│ ]*(?:[├└]── )?)(.*?) \(([A-Z, ]+)\)$/.exec(line);
    if (m === null) continue;
    const depth = Math.floor([...m[1]!].length / 4);
    stack.length = depth;
    stack.push(m[2]!);
    out.push({ path: stack.join(''), methods: m[3]!.split(', ').filter((x) => x !== 'HEAD') });
  }
  return out;
}

type Schema = Record<string, unknown>;

describeEachDriver('every route fuzzed with hostile input answers no 500', (getDb) => {
  let svc: FakeService;
  let engine: Engine;
  let api: Api;
  let doc: { paths: Record<string, Record<string, Schema>>; components?: { schemas?: Record<string, Schema> } };
  const valid: Record<string, string> = { env: ENV, logicId: 'fz.parked', version: '1', step: 'approve' };
  const auths: Record<string, Record<string, string>> = {};

  beforeAll(async () => {
    svc = await new FakeService().on('/later', () => ({ status: 202, body: { status: 'waiting' } })).listen();
    engine = new Engine({ db: getDb(), env: ENV, executors: { handlers: new Map([['SVC', { url: svc.url }]]) } });
    api = await testApi(engine);
    auths['admin'] = await bearer({ envs: [ENV], scope: 'flow:admin' });
    auths['other-team'] = await bearer({ envs: [ENV], scope: 'flow:admin:other.* flow:read:other.* flow:start:other.* flow:publish:other.*' });
    auths['none'] = {};
    await engine.publishVersion(ENV, parked());
    valid['id'] = (await engine.start({ logicId: 'fz.parked', input: {}, env: ENV })).id;
    await settle(engine);
    valid['resumeToken'] = svc.calls('/later')[0]!.headers['x-flow-resume-token']!;
    valid['jobId'] = randomUUID();
    doc = (await api.app.inject({ url: '/openapi.json' })).json();
  });
  afterAll(async () => {
    await api.close();
    await engine.close();
    await svc.close();
  });

  const deref = (s: Schema | undefined): Schema => {
    let cur = s ?? {};
    while (typeof cur['$ref'] === 'string') cur = doc.components?.schemas?.[(cur['$ref'] as string).split('/').pop()!] ?? {};
    return cur;
  };

  /** A value the schema accepts, so that a hostile value elsewhere gets past validation to the engine. */
  function sample(raw: Schema | undefined, name: string): unknown {
    const s = deref(raw);
    const alt = (s['anyOf'] ?? s['oneOf']) as Schema[] | undefined;
    if (alt !== undefined) return sample(alt[0], name);
    const named: Record<string, unknown> = { logicId: 'fz.parked', step: 'ask', rewindTo: 'ask', option: 'yes', type: 'fz.happened', reason: 'r', version: 1, url: 'http://127.0.0.1:9/cb' };
    if (name in named) return named[name];
    if (Array.isArray(s['enum'])) return s['enum'][0];
    if (s['const'] !== undefined) return s['const'];
    switch (s['type']) {
      case 'object': {
        const props = (s['properties'] ?? {}) as Record<string, Schema>;
        const req = new Set((s['required'] ?? []) as string[]);
        return Object.fromEntries(Object.entries(props).filter(([k]) => req.has(k)).map(([k, v]) => [k, sample(v, k)]));
      }
      case 'string':
        return s['format'] === 'uuid' ? randomUUID() : s['format'] === 'date-time' ? '2024-01-01T00:00:00Z' : 'k';
      case 'integer':
      case 'number':
        return Math.max(1, Number(s['minimum'] ?? 1));
      case 'boolean':
        return false;
      case 'array':
        return [];
      default:
        return {};
    }
  }

  /** Hostile values that fit a slot's type, so that they get past the schema to the engine. */
  function poolOf(name: string, s: Schema, where: string): unknown[] {
    if (name === 'cursor') return HOSTILE_CURSORS;
    if (s['format'] === 'date-time') return HOSTILE_DATES;
    if (s['type'] === 'integer' || s['type'] === 'number' || name === 'version') return HOSTILE_NUMBERS;
    if (s['type'] === 'string' || where !== 'body') return HOSTILE_STRINGS;
    return HOSTILE_JSON;
  }

  /** Percent-encodes a value for a path or query, lone surrogates included (as raw bytes, not U+FFFD). */
  const enc = (v: string) => {
    try {
      return encodeURIComponent(v);
    } catch {
      return [...v].map((ch) => (/[\ud800-\udfff]/.test(ch) ? '%ED%A0%80' : encodeURIComponent(ch))).join('');
    }
  };

  it('no route answers 500, and every refusal is problem+json with a catalogued code', { timeout: 240_000 }, async () => {
    const printed = routesOf(api.app.printRoutes({ commonPrefix: false }));
    const routes = printed.flatMap((r) => r.methods.map((method) => ({ method, path: r.path })));
    const openapi = new Set(Object.keys(doc.paths).map((p) => p.replace(/\{(\w+)\}/g, ':$1')));
    // every API route is in the OpenAPI document, so its schemas drive the fuzz
    for (const r of routes) if (r.path.startsWith('/v1/')) expect(openapi.has(r.path), r.path).toBe(true);

    const slotCount = (route: { method: string; path: string }) => {
      const op = doc.paths[route.path.replace(/:(\w+)/g, '{$1}')]?.[route.method.toLowerCase()];
      const body = deref((op?.['requestBody'] as { content?: Record<string, { schema?: Schema }> } | undefined)?.content?.['application/json']?.schema);
      const props = Object.keys(deref((body['anyOf'] as Schema[] | undefined)?.[0] ?? body)['properties'] ?? {});
      const query = ((op?.['parameters'] ?? []) as { in: string }[]).filter((p) => p.in === 'query');
      return Math.max(1, [...route.path.matchAll(/:(\w+)|\*/g)].length + query.length + (route.method === 'GET' ? 0 : props.length));
    };
    const pairs = routes.flatMap((route) => Array.from({ length: slotCount(route) }, (_, slot) => ({ route, slot })));
    let run = 0;
    const failures: string[] = [];
    const reached = new Map<string, number>();
    const request = fc.record({
      who: fc.constantFrom('admin', 'admin', 'admin', 'other-team', 'none'),
      // the slots (path params, query values, body fields) given a hostile value; the rest are valid
      extra: fc.option(fc.nat(), { freq: 3 }),
      // one request in four is valid throughout: the scope checks are met with real names
      clean: fc.nat(3).map((n) => n === 0),
      typed: fc.array(fc.nat(), { minLength: 3, maxLength: 3 }),
      untyped: fc.array(hostileJson, { minLength: 3, maxLength: 3 }),
      whole: fc.option(hostileJson, { freq: 12 }),
    });

    await fc.assert(
      fc.asyncProperty(request, async (gen) => {
        // round-robin over every (route, slot): each slot of each route gets its share of hostile values
        const pair = pairs[run++ % pairs.length]!;
        const r = { ...gen, route: pair.route, targets: gen.clean ? [] : gen.extra === null ? [pair.slot] : [pair.slot, gen.extra] };
        const op = doc.paths[r.route.path.replace(/:(\w+)/g, '{$1}')]?.[r.route.method.toLowerCase()];
        const pathNames = [...r.route.path.matchAll(/:(\w+)|\*/g)].map((m) => m[1] ?? '*');
        const queryParams = ((op?.['parameters'] ?? []) as { in: string; name: string; schema?: Schema }[]).filter((p) => p.in === 'query');
        const bodySchema = deref((op?.['requestBody'] as { content?: Record<string, { schema?: Schema }> } | undefined)?.content?.['application/json']?.schema);
        const bodyProps = (deref((bodySchema['anyOf'] as Schema[] | undefined)?.[0] ?? bodySchema)['properties'] ?? {}) as Record<string, Schema>;
        const slots = [
          ...pathNames.map((n) => ({ where: 'path', name: n, schema: undefined as Schema | undefined })),
          ...queryParams.map((p) => ({ where: 'query', name: p.name, schema: p.schema })),
          ...(r.route.method === 'GET' ? [] : Object.entries(bodyProps).map(([n, sc]) => ({ where: 'body', name: n, schema: sc }))),
        ];
        // a hostile value per targeted slot: three times in four one that fits the slot's type, to get past the schema
        const hostile = new Map<number, unknown>();
        r.targets.forEach((t, i) => {
          if (slots.length === 0) return;
          const slot = slots[t % slots.length]!;
          const pool = poolOf(slot.name, deref(slot.schema), slot.where);
          hostile.set(t % slots.length, r.typed[i]! % 4 !== 3 ? pool[Math.floor(r.typed[i]! / 4) % pool.length] : r.untyped[i]);
        });
        const asText = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v) ?? String(v));

        let slot = 0;
        let url = r.route.path.replace(/:(\w+)|\*/g, (_m, name: string | undefined) => {
          const h = hostile.get(slot++);
          // a live stream of a real instance never ends: it only gets ids that do not exist
          if (name === 'id' && r.route.path.endsWith('/live') && h === undefined) return randomUUID();
          return enc(h === undefined ? (valid[name ?? ''] ?? 'index.html') : asText(h));
        });
        const query: string[] = [];
        for (const p of queryParams) {
          const h = hostile.get(slot++);
          if (h !== undefined) query.push(`${p.name}=${enc(asText(h))}`);
        }
        if (query.length > 0) url += `?${query.join('&')}`;

        let payload: string | undefined;
        if (r.route.method !== 'GET') {
          const body = sample(bodySchema, '') as Record<string, unknown>;
          for (const k of Object.keys(bodyProps)) {
            const h = hostile.get(slot++);
            if (h !== undefined) body[k] = h;
          }
          payload = JSON.stringify(r.clean ? body : (r.whole ?? body));
        }
        const res = await api.app.inject({
          method: r.route.method as 'GET',
          url,
          headers: { ...auths[r.who], ...(payload === undefined ? {} : { 'content-type': 'application/json' }) },
          ...(payload === undefined ? {} : { payload }),
        });
        const code = res.statusCode >= 400 ? (res.json() as { code?: string }).code : undefined;
        const key = `${r.route.method} ${r.route.path}`;
        if (code !== 'FLOW_SCHEMA_INVALID' && code !== 'FLOW_UNAUTHENTICATED') reached.set(key, (reached.get(key) ?? 0) + 1);
        const what = `${r.who} ${r.route.method} ${url.slice(0, 200)} ${payload?.slice(0, 200) ?? ''} → ${res.statusCode} ${res.body.slice(0, 160)}`;
        // FUZZ_LOG=<file>: every request and its answer, to see what a seed reaches
        if (process.env['FUZZ_LOG']) appendFileSync(process.env['FUZZ_LOG'], `${what}\n`);
        if (res.statusCode >= 500) failures.push(what);
        // everything in the env belongs to fz.*: a token narrowed to other.* changes none of it, and
        // reads none of it (a listing filtered down to its own definitions may answer, empty)
        else if (r.who === 'other-team' && r.route.path.startsWith('/v1/envs/') && res.statusCode < 300) {
          if (r.route.method !== 'GET' || res.body.includes('fz.') || res.body.includes(valid['id']!)) failures.push(`another team's token was let in: ${what}`);
        }
        else if (res.statusCode >= 400) {
          if (!/^application\/problem\+json/.test(String(res.headers['content-type']))) failures.push(`not problem+json: ${what}`);
          else if (code === undefined || !CATALOGUE.has(code)) failures.push(`code not in docs/errors.md: ${what}`);
        }
      }),
      { seed: SEED, numRuns: Math.max(RUNS, pairs.length * 4), endOnFailure: true },
    );
    if (failures.length > 0) process.stderr.write(`route fuzz (seed ${SEED}, FUZZ_SEED=${SEED} to replay):\n${failures.join('\n')}\n`);
    expect(failures, `seed ${SEED}`).toEqual([]);
    // the generators reach past the schemas into the engine on most API routes
    expect(reached.size, `routes reached past validation: ${[...reached.keys()].join(', ')}`).toBeGreaterThanOrEqual(15);
  });
});
