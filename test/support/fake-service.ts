import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Received {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: unknown;
  /** The body exactly as received (signatures are over these bytes). */
  raw: string;
}

export type Reply = {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
  /** Sent instead of `body`, as it is: bytes that are not JSON, or a writer that streams the body itself. */
  raw?: string | Buffer | ((res: ServerResponse) => void);
  /** Drops the connection instead of answering (a reset). */
  reset?: boolean;
};
export type Route = (req: Received) => Reply | Promise<Reply>;

/**
 * A real HTTP owning service on a loopback port, answering per path, recording every request
 * and keeping an idempotency ledger: the first answer per Idempotency-Key is replayed for
 * repeats, and `applied` counts each key once.
 */
export class FakeService {
  readonly received: Received[] = [];
  readonly applied = new Map<string, number>();
  #routes = new Map<string, Route>();
  #server: Server;
  url = '';

  constructor() {
    this.#server = createServer((req, res) => {
      void this.#handle(req).then((reply) => {
        if (reply.reset === true) return void req.socket.destroy();
        res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers });
        if (typeof reply.raw === 'function') return reply.raw(res);
        res.end(reply.raw ?? (reply.body === undefined ? '' : JSON.stringify(reply.body)));
      });
    });
  }

  on(path: string, route: Route): this {
    this.#routes.set(path, route);
    return this;
  }

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this;
  }

  calls(path: string): Received[] {
    return this.received.filter((r) => r.path === path);
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  async #handle(req: IncomingMessage): Promise<Reply> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const received: Received = {
      method: req.method ?? 'GET',
      path: req.url ?? '/',
      headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)])),
      body: text === '' ? null : JSON.parse(text),
      raw: text,
    };
    this.received.push(received);
    const route = this.#routes.get(received.path);
    if (route === undefined) return { status: 404, body: { message: `no route ${received.path}` } };
    const reply = await route(received);
    const key = received.headers['idempotency-key'];
    if (key !== undefined && reply.status >= 200 && reply.status < 300) this.applied.set(key, (this.applied.get(key) ?? 0) + 1);
    return reply;
  }
}

/** A service whose `path` answers nothing until `open()`: then every waiting call at once, 200. */
export async function gatedService(path: string): Promise<{ svc: FakeService; open: () => void }> {
  let open: () => void = () => {};
  const gate = new Promise<void>((r) => (open = r));
  const svc = await new FakeService()
    .on(path, async () => {
      await gate;
      return { status: 200, body: { ok: true } };
    })
    .listen();
  return { svc, open };
}
