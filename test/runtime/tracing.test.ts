import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Telemetry, startTelemetry, tracingWanted } from '../../cli/telemetry.ts';
import { context, ROOT_CONTEXT, trace } from '@opentelemetry/api';
import type { Api } from '../../engine/api/server.ts';
import { Engine } from '../../engine/runtime/engine.ts';
import { tracer } from '../../engine/tracing.ts';
import type { Db } from '../../engine/store/db.ts';
import { createFuncRuntime, type FuncRuntime } from '../../host-functions/index.ts';
import { bearer, testApi } from '../api/support.ts';
import { type BuiltTestModules, buildTestModules, TEST_MEMORY_PAGES } from '../host-functions/helpers/test-modules.ts';
import { closeTestDb, openTestDb } from '../support/db.ts';
import { advance, settle, uniqueLogic } from '../support/engine.ts';
import { FakeService } from '../support/fake-service.ts';

/** A span as the OTLP/HTTP JSON exporter sends it, its attributes flattened. */
interface Exported {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attrs: Record<string, unknown>;
  links: { traceId: string; spanId: string }[];
  status: { code?: number };
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
  doubleValue?: number;
  arrayValue?: { values: OtlpValue[] };
}
const otlpValue = (v: OtlpValue): unknown =>
  v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.boolValue ?? v.doubleValue ?? v.arrayValue?.values.map(otlpValue)));

/** A real OTLP/HTTP receiver on loopback: it takes the exporter's POST /v1/traces and keeps the spans. */
class OtlpReceiver {
  readonly spans: Exported[] = [];
  readonly contentTypes: string[] = [];
  #server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      this.contentTypes.push(String(req.headers['content-type']));
      if (req.method === 'POST' && req.url === '/v1/traces') this.#take(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
  });
  url = '';

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this;
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }

  #take(body: { resourceSpans: { scopeSpans: { spans: Record<string, never>[] }[] }[] }): void {
    for (const rs of body.resourceSpans) {
      for (const ss of rs.scopeSpans) {
        for (const s of ss.spans as Record<string, unknown>[]) {
          const attributes = (s['attributes'] ?? []) as { key: string; value: OtlpValue }[];
          this.spans.push({
            traceId: s['traceId'] as string,
            spanId: s['spanId'] as string,
            parentSpanId: (s['parentSpanId'] as string | undefined) ?? '',
            name: s['name'] as string,
            kind: s['kind'] as number,
            attrs: Object.fromEntries(attributes.map((a) => [a.key, otlpValue(a.value)])),
            links: ((s['links'] ?? []) as { traceId: string; spanId: string }[]).map((l) => ({ traceId: l.traceId, spanId: l.spanId })),
            status: (s['status'] ?? {}) as { code?: number },
          });
        }
      }
    }
  }
}

const CALLER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN = '00f067aa0ba902b7';
const APPROVER_TRACE = '0af7651916cd43dd8448eb211c80319c';
const APPROVER_SPAN = 'b7ad6b7169203331';
const ENV = 'test-env';

describe('tracing bootstrap', () => {
  it('loads no SDK when no OTEL_* variable asks for traces', async () => {
    let loaded = 0;
    const load = async () => {
      loaded++;
      throw new Error('the SDK must not load');
    };
    for (const env of [
      {},
      { OTEL_SERVICE_NAME: 'x', OTEL_EXPORTER_OTLP_HEADERS: 'a=b' },
      { OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' },
      { OTEL_SDK_DISABLED: 'true', OTEL_TRACES_EXPORTER: 'otlp' },
      { OTEL_EXPORTER_OTLP_ENDPOINT: ' ' },
    ]) {
      expect(await startTelemetry(env, load)).toBeNull();
    }
    expect(loaded).toBe(0);
    // and the engine's tracer is the API's no-op
    expect(trace.getTracer('sentin8-flow').startSpan('x').isRecording()).toBe(false);
  });

  it('asks for the SDK on OTEL_TRACES_EXPORTER=otlp or an OTLP endpoint', () => {
    expect(tracingWanted({ OTEL_TRACES_EXPORTER: 'otlp' })).toBe(true);
    expect(tracingWanted({ OTEL_TRACES_EXPORTER: 'console,otlp' })).toBe(true);
    expect(tracingWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' })).toBe(true);
    expect(tracingWanted({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://127.0.0.1:4318/v1/traces' })).toBe(true);
    expect(tracingWanted({ OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: 'http://127.0.0.1:4318/v1/metrics' })).toBe(false);
  });

  it('exports OTLP/HTTP protobuf unless OTEL_EXPORTER_OTLP_PROTOCOL asks for another, as the specification says', async () => {
    const bodies: { type: string; bytes: number }[] = [];
    const server = createServer((req, res) => {
      let bytes = 0;
      req.on('data', (c: Buffer) => {
        bytes += c.length;
      });
      req.on('end', () => {
        bodies.push({ type: String(req.headers['content-type']), bytes });
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const saved = { ...process.env };
    try {
      for (const protocol of [undefined, 'http/json']) {
        process.env = { ...saved, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces` };
        if (protocol !== undefined) process.env['OTEL_EXPORTER_OTLP_PROTOCOL'] = protocol;
        const telemetry = (await startTelemetry())!;
        tracer().startSpan('flow.start').end();
        await telemetry.flush();
        await telemetry.shutdown();
      }
    } finally {
      process.env = saved;
      await new Promise((resolve) => server.close(resolve));
    }
    expect(bodies.map((b) => b.type)).toEqual(['application/x-protobuf', 'application/json']);
    expect(bodies.every((b) => b.bytes > 0)).toBe(true);
  });
});

describe.skipIf(!process.env['DATABASE_URL'])('a payment traced end to end (postgres)', () => {
  let db: Db;
  let svc: FakeService;
  let receiver: OtlpReceiver;
  let engine: Engine;
  let api: Api;
  let telemetry: Telemetry | null = null;
  const saved = { ...process.env };
  let charges = 0;

  let built: BuiltTestModules;
  let runtime: FuncRuntime;
  beforeAll(async () => {
    receiver = await new OtlpReceiver().listen();
    built = await buildTestModules(['one-call']);
    runtime = createFuncRuntime({ loadModule: built.load, maxMemoryPages: TEST_MEMORY_PAGES });
    svc = await new FakeService()
      .on('/reserve', () => ({ status: 200, body: { reservation: 'r-1' } }))
      .on('/release', () => ({ status: 200, body: {} }))
      .on('/charge', () => (++charges === 1 ? { status: 503 } : { status: 200, body: { charge: 'c-1' } }))
      .on('/refund', () => ({ status: 200, body: {} }))
      .on('/ship', () => ({ status: 422, body: { message: 'address rejected' } }))
      .on('/lookup', () => ({ status: 200, body: { history: ['ok'] } }))
      .listen();
    db = await openTestDb('postgres');
    engine = new Engine({ db, env: ENV, executors: { handlers: new Map([['TEST', { url: svc.url }]]), funcRuntime: runtime } });
    api = await testApi(engine);
    // the bootstrap `s8flow start` runs, on the standard variables
    process.env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'] = `${receiver.url}/v1/traces`;
    // JSON, so this receiver reads the spans without a protobuf decoder (the default is protobuf)
    process.env['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'] = 'http/json';
    process.env['OTEL_SERVICE_NAME'] = 'flow-under-test';
    telemetry = await startTelemetry();
  }, 120_000);
  afterAll(async () => {
    await telemetry?.shutdown();
    process.env = saved;
    await api?.close();
    await engine?.close();
    await runtime?.close();
    await built?.cleanup();
    if (db !== undefined) await closeTestDb(db);
    await svc?.close();
    await receiver?.close();
  });

  it("a payment with a retry, a decision, a timer and a compensation is one trace: the caller's, every span under the start span", async () => {
    expect(telemetry).not.toBeNull();

    const doc = uniqueLogic({
      start: 'reserve',
      steps: {
        reserve: { kind: 'proxy', handler: 'TEST', path: '/reserve', next: 'charge', compensate: { kind: 'proxy', handler: 'TEST', path: '/release' } },
        charge: {
          kind: 'proxy',
          handler: 'TEST',
          path: '/charge',
          retry: { maxAttempts: 3, initialMs: 0 },
          next: 'approve',
          compensate: { kind: 'proxy', handler: 'TEST', path: '/refund' },
        },
        approve: { kind: 'decision', options: ['ship'], next: 'cool' },
        cool: { kind: 'delay', duration: 'PT1M', next: 'ship' },
        ship: { kind: 'proxy', handler: 'TEST', path: '/ship' },
      },
    });
    await engine.publish(doc, ENV);
    const auth = await bearer();
    const started = await api.app.inject({
      method: 'POST',
      url: `/v1/envs/${ENV}/workflows`,
      headers: { ...auth, traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01` },
      payload: { logicId: doc.logicId, input: { amount: 10 } },
    });
    expect(started.statusCode).toBe(201);
    const id = started.json<{ id: string }>().id;
    await settle(engine);
    expect((await engine.get(id, ENV)).state).toBe('waiting');
    const decided = await api.app.inject({
      method: 'POST',
      url: `/v1/envs/${ENV}/workflows/${id}/decisions/approve`,
      headers: { ...auth, traceparent: `00-${APPROVER_TRACE}-${APPROVER_SPAN}-01` },
      payload: { option: 'ship' },
    });
    expect(decided.statusCode).toBe(200);
    await settle(engine);
    await advance(engine, 61_000);
    expect((await engine.get(id, ENV)).state).toBe('compensated');

    await telemetry!.flush();
    expect(receiver.contentTypes.every((t) => t.startsWith('application/json'))).toBe(true);

    const spans = receiver.spans.filter((s) => s.traceId === CALLER_TRACE);
    // one trace, the caller's
    expect(new Set(spans.map((s) => s.traceId))).toEqual(new Set([CALLER_TRACE]));
    const byId = new Map(spans.map((s) => [s.spanId, s]));
    const start = spans.filter((s) => s.name === 'flow.start');
    expect(start).toHaveLength(1);
    expect(start[0]!.parentSpanId).toBe(CALLER_SPAN);
    expect(start[0]!.attrs).toMatchObject({ 'flow.env': ENV, 'flow.logic_id': doc.logicId, 'flow.workflow_id': id, 'flow.created': true });
    const root = start[0]!.spanId;
    // every span reaches the start span through its parents: one tree
    for (const s of spans) {
      let at: Exported | undefined = s;
      for (let hops = 0; at !== undefined && at.spanId !== root && hops < 5; hops++) at = byId.get(at.parentSpanId);
      expect(at?.spanId, `${s.name} ${JSON.stringify(s.attrs)}`).toBe(root);
    }

    const named = (name: string, step?: string) => spans.filter((s) => s.name === name && (step === undefined || s.attrs['flow.step'] === step));
    const attempts = named('flow.attempt');
    for (const a of attempts) expect(a.parentSpanId).toBe(root);
    expect(attempts.map((a) => [a.attrs['flow.step'], a.attrs['flow.attempt'], a.attrs['flow.outcome']])).toEqual([
      ['reserve', 1, 'succeeded'],
      ['charge', 1, 'failed'],
      ['charge', 2, 'succeeded'],
      ['ship', 1, 'failed'],
    ]);
    expect(named('flow.attempt', 'charge')[0]!.attrs).toMatchObject({ 'flow.error.code': 'HTTP_503', 'flow.retryable': true });
    expect(named('flow.attempt', 'charge')[0]!.status.code).toBe(2); // ERROR
    expect(named('flow.attempt', 'ship')[0]!.attrs).toMatchObject({ 'flow.error.code': 'HTTP_422', 'flow.retryable': false });
    // compensations, last registered first
    expect(named('flow.compensation').map((c) => [c.attrs['flow.step'], c.attrs['flow.outcome'], c.parentSpanId])).toEqual([
      ['charge', 'succeeded', root],
      ['reserve', 'succeeded', root],
    ]);
    // queue waits: after the start, and after the retry's backoff (the rest ran on under one lease)
    expect(named('flow.queue_wait').map((q) => [q.attrs['flow.step'], q.parentSpanId])).toEqual([
      ['reserve', root],
      ['charge', root],
    ]);
    // the decision: its wait and its answer, the answer linked to the approver's request
    expect(named('flow.decision.wait', 'approve')).toHaveLength(1);
    const answer = named('flow.decision.answer', 'approve');
    expect(answer).toHaveLength(1);
    expect(answer[0]!.attrs['flow.decision.option']).toBe('ship');
    expect(answer[0]!.links).toEqual([{ traceId: APPROVER_TRACE, spanId: APPROVER_SPAN }]);
    // the delay's timer firing
    expect(named('flow.timer').map((t) => [t.attrs['flow.step'], t.attrs['flow.outcome']])).toEqual([['cool', 'delay']]);

    // a proxy step is one call: each attempt (and compensation) is the call's HTTP client span
    // itself, one span a step, and the service got that span as its traceparent
    const clients = spans.filter((s) => s.kind === 3);
    expect(clients).toHaveLength(svc.received.length);
    for (const call of svc.received) {
      const header = call.headers['traceparent'];
      expect(header, call.path).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
      const [, traceId, spanId] = header!.split('-');
      expect(traceId).toBe(CALLER_TRACE);
      const client = byId.get(spanId!);
      expect(['flow.attempt', 'flow.compensation']).toContain(client?.name);
      expect(client?.kind).toBe(3); // CLIENT
      expect(client?.attrs).toMatchObject({ 'http.request.method': 'POST', 'url.full': `${svc.url}${call.path}` });
      expect(client?.parentSpanId).toBe(root);
    }
    expect(byId.get(svc.calls('/refund')[0]!.headers['traceparent']!.split('-')[2]!)!.name).toBe('flow.compensation');
    expect(named('flow.attempt', 'ship')[0]!.attrs['http.response.status_code']).toBe(422);
  });

  it("a func step's module runs and its host call are spans under its attempt, the host call's HTTP span under the call", async () => {
    const doc = uniqueLogic({
      domain: 'test',
      start: 'score',
      modules: { risk: { sha256: built.hash['one-call']!, imports: { lookup: { handler: 'TEST', path: '/lookup' } } } },
      steps: { score: { kind: 'func', module: 'risk', input: '{ "account": input.account }' } },
    });
    await engine.publishVersion(ENV, doc, { [built.hash['one-call']!]: await readFile(join(built.dir, 'modules', `${built.hash['one-call']}.wasm`)) });
    const { id } = await engine.start({ logicId: doc.logicId, input: { account: 'a-1' }, env: ENV });
    await settle(engine);
    expect((await engine.get(id, ENV)).state).toBe('completed');
    await telemetry!.flush();

    const start = receiver.spans.find((s) => s.name === 'flow.start' && s.attrs['flow.workflow_id'] === id)!;
    // started in process with no caller span: the start span is the trace's root
    expect(start.parentSpanId).toBe('');
    const spans = receiver.spans.filter((s) => s.traceId === start.traceId);
    const byId = new Map(spans.map((s) => [s.spanId, s]));
    const parentName = (s: Exported) => byId.get(s.parentSpanId)?.name;
    // the host call suspends the first run (one attempt, ending in progress), the second run completes
    const attempts = spans.filter((s) => s.name === 'flow.attempt');
    expect(attempts.map((a) => a.attrs['flow.outcome'])).toEqual(['progress', 'succeeded']);
    const runs = spans.filter((s) => s.name === 'flow.module_run');
    expect(runs.map((r) => [r.attrs['flow.module'], r.attrs['flow.outcome'], parentName(r)])).toEqual([
      ['risk', 'suspended', 'flow.attempt'],
      ['risk', 'done', 'flow.attempt'],
    ]);
    const calls = spans.filter((s) => s.name === 'flow.host_call');
    expect(calls.map((c) => [c.attrs['flow.host_call.import'], c.attrs['flow.outcome'], parentName(c)])).toEqual([['lookup', 'succeeded', 'flow.attempt']]);
    // a func step's attempt is not one call: the host call's request has a client span of its own
    expect(attempts.map((a) => a.kind)).toEqual([1, 1]); // INTERNAL
    const http = spans.filter((s) => s.kind === 3);
    expect(http.map((h) => [h.name, h.parentSpanId])).toEqual([['POST', calls[0]!.spanId]]);
    expect(svc.calls('/lookup').at(-1)!.headers['traceparent']).toBe(`00-${start.traceId}-${http[0]!.spanId}-01`);
  });

  it('tracing on registers no context manager: no async hook taxes every promise of the process', async () => {
    // The engine hands each span its parent; nothing may depend on an active context. The
    // SDK's default manager (AsyncLocalStorage) would make this `with` take effect, and once the
    // exporter ran a `with`, every promise would pay a hook (cli/telemetry-sdk.ts).
    const span = tracer().startSpan('probe');
    expect(span.isRecording()).toBe(true);
    expect(context.with(trace.setSpan(ROOT_CONTEXT, span), () => context.active())).toBe(ROOT_CONTEXT);
    span.end();
  });

  it("once the SDK is shut down, the engine's spans are no-ops again", async () => {
    expect(tracer().startSpan('x').isRecording()).toBe(true);
    await telemetry!.shutdown();
    telemetry = null;
    expect(tracer().startSpan('x').isRecording()).toBe(false);
  });
});

