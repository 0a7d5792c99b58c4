import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createFlowClient } from '../client/index.ts';

/**
 * A small owning service for the examples: the internal API the workflows proxy back to, for every
 * example domain (payments, provisioning, statements: `DEMO_HANDLERS`). It
 * behaves as a real one should — each Idempotency-Key is applied once and its first answer is
 * replayed — and fails on purpose for a few well-known inputs so the demo shows retries and
 * compensation:
 * - account `acct-flaky` makes the first reserve attempt answer 503;
 * - a payment id containing `declined` makes capture answer 402 (permanent);
 * - account `acct-risky` has chargebacks on record, so the risk module asks for an approval;
 * - account `acct-fraud` is referred by the fraud check (payments.capture@3).
 *
 * With `engineUrl`, sending the customer's notification is asynchronous, as mail is: `/notify`
 * answers `202 {"status":"waiting"}` and, once sent, completes the step through the engine's
 * callback route with the X-Flow-Resume-Token it was called with (ARCHITECTURE.md, Contracts: HTTP API).
 */
export interface DemoService {
  url: string;
  /** Every request in arrival order, for timelines and tests. */
  log: { method: string; path: string; key: string | undefined; status: number }[];
  /** Every completion posted to the engine's callback route, with the state it answered. */
  callbacks: { workflowId: string; state: string }[];
  /** From now on, complete `/notify` asynchronously through this engine's callback route. */
  connect(engineUrl: string): void;
  close(): Promise<void>;
}

/** The handlers (`FLOW_HANDLER_<NAME>_URL`) this service answers for. */
export const DEMO_HANDLERS = ['PAYMENTS', 'PROVISIONING', 'STATEMENTS'] as const;

type Answer = { status: number; body: unknown; after?: () => Promise<void> };
type Handler = (body: Record<string, unknown>, req: IncomingMessage) => Answer;

export async function startDemoService(opts: { engineUrl?: string } = {}): Promise<DemoService> {
  let engine = opts.engineUrl === undefined ? null : createFlowClient({ baseUrl: opts.engineUrl });
  const callbacks: DemoService['callbacks'] = [];
  const pending = new Set<Promise<void>>();
  const answered = new Map<string, Answer>();
  const flaky = new Set<string>();
  const reservedCents = new Map<string, number>();
  let seq = 0;
  const id = (prefix: string) => `${prefix}_${String(++seq).padStart(4, '0')}`;

  const routes: Record<string, Handler> = {
    '/funds/reserve': (b) => {
      if (b['accountId'] === 'acct-flaky' && !flaky.has(String(b['paymentId']))) {
        flaky.add(String(b['paymentId']));
        return { status: 503, body: { message: 'ledger busy, try again' } };
      }
      const reservationId = id('res');
      reservedCents.set(reservationId, Number(b['cents']));
      return { status: 200, body: { reservationId } };
    },
    '/funds/release': () => ({ status: 200, body: { released: true } }),
    '/accounts/history': (b) => ({ status: 200, body: { accountId: b['accountId'], chargebacks: b['accountId'] === 'acct-risky' ? 2 : 0 } }),
    '/funds/capture': (b) =>
      String(b['paymentId']).includes('declined')
        ? { status: 402, body: { message: 'card declined by issuer' } }
        : { status: 200, body: { captureId: id('cap'), capturedCents: reservedCents.get(String(b['reservationId'])) ?? 0 } },
    '/funds/refund': () => ({ status: 200, body: { refunded: true } }),
    // payments.capture@3: an account `acct-fraud` is referred, any other cleared
    '/fraud/check': (b) => ({ status: 200, body: { checkId: id('frd'), verdict: b['accountId'] === 'acct-fraud' ? 'refer' : 'clear' } }),
    // provisioning: a tenant, and one service per child workflow
    '/tenants': (b) => ({ status: 200, body: { tenantRef: id(`tnt-${String(b['tenantId'])}`) } }),
    '/tenants/delete': () => ({ status: 200, body: { deleted: true } }),
    '/tenants/activate': (b) => ({ status: 200, body: { active: true, services: (b['serviceIds'] as unknown[] | undefined)?.length ?? 0 } }),
    '/services/allocate': () => ({ status: 200, body: { serviceId: id('svc') } }),
    '/services/deallocate': () => ({ status: 200, body: { deallocated: true } }),
    '/services/configure': (b) => ({ status: 200, body: { configured: true, primary: b['primary'] === true } }),
    // statements: enrolment and the welcome statement
    '/statements/enrol': () => ({ status: 200, body: { scheduleId: id('sch'), firstStatementOn: '2026-01-31' } }),
    '/statements/unenrol': () => ({ status: 200, body: { unenrolled: true } }),
    '/statements/generate': () => ({ status: 200, body: { statementId: id('stm'), pages: 2 } }),
    '/notify': (_b, req) => {
      const token = req.headers['x-flow-resume-token'];
      const flow = engine;
      if (flow === null || typeof token !== 'string') return { status: 200, body: { sent: true } };
      // accepted now, sent later: the engine parks the step until the callback below
      return {
        status: 202,
        body: { status: 'waiting' },
        after: async () => {
          callbacks.push(await flow.completeCallback(token, { output: { sent: true, messageId: id('msg') } }));
        },
      };
    },
  };

  const log: DemoService['log'] = [];
  const server: Server = createServer((req, res) => {
    void handle(req, res);
  });

  async function handle(req: IncomingMessage, res: ServerResponse) {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const body = (text === '' ? {} : JSON.parse(text)) as Record<string, unknown>;
    const key = req.headers['idempotency-key'] as string | undefined;
    const path = req.url ?? '/';
    const route = routes[path];
    let answer: Answer | undefined = key === undefined ? undefined : answered.get(key);
    if (answer === undefined) {
      answer = route ? route(body, req) : { status: 404, body: { message: `no route ${path}` } };
      // transient answers are not remembered: a retry may succeed
      if (key !== undefined && answer.status < 500) answered.set(key, answer);
    }
    log.push({ method: req.method ?? 'GET', path, key, status: answer.status });
    res.writeHead(answer.status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(answer.body));
    const after = answer.after;
    if (after !== undefined) {
      delete answer.after; // a replayed answer does not send twice
      const done = new Promise<void>((resolve) => setImmediate(resolve)).then(after).catch((err) => {
        process.stderr.write(`demo service: callback failed: ${(err as Error).message}\n`);
      });
      pending.add(done);
      void done.finally(() => pending.delete(done));
    }
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    log,
    callbacks,
    connect(engineUrl) {
      engine = createFlowClient({ baseUrl: engineUrl });
    },
    async close() {
      await Promise.all(pending);
      await new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      });
    },
  };
}
