import { createServer, type Server, type Socket, connect } from 'node:net';
import type { AddressInfo } from 'node:net';

/**
 * A TCP proxy in front of Postgres that can lose an answer the way a network does: armed with a
 * piece of SQL, it forwards the next statement that contains it, lets the server run it to the
 * end — ReadyForQuery, sent after an implicit transaction has committed — and then cuts both
 * connections without passing on a byte of the answer. The client sees its connection die; the
 * server has committed.
 */
export class PgProxy {
  #server: Server;
  #sockets = new Set<Socket>();
  #armed: string | null = null;
  /** How many answers were swallowed (each: a statement committed, its client told nothing). */
  cuts = 0;
  url = '';

  constructor(private readonly target: URL) {
    this.#server = createServer((client) => this.#pipe(client));
  }

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    const url = new URL(this.target.href);
    url.hostname = '127.0.0.1';
    url.port = String((this.#server.address() as AddressInfo).port);
    this.url = url.href;
    return this;
  }

  /** The next statement whose text contains `sql` commits, and its answer is lost. */
  loseAnswerTo(sql: string): void {
    this.#armed = sql;
  }

  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #pipe(client: Socket): void {
    const server = connect(Number(this.target.port || 5432), this.target.hostname);
    this.#sockets.add(client).add(server);
    let swallowing = false;
    let pending = Buffer.alloc(0);
    const cut = () => {
      this.cuts++;
      client.destroy();
      server.destroy();
    };
    client.on('data', (chunk: Buffer) => {
      if (this.#armed !== null && chunk.includes(this.#armed)) {
        this.#armed = null;
        swallowing = true;
      }
      server.write(chunk);
    });
    server.on('data', (chunk: Buffer) => {
      if (!swallowing) {
        client.write(chunk);
        return;
      }
      // read whole backend messages (type byte, int32 length) until ReadyForQuery ('Z')
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 5) {
        const length = pending.readInt32BE(1);
        if (pending.length < 1 + length) break;
        const type = String.fromCharCode(pending[0]!);
        pending = pending.subarray(1 + length);
        if (type === 'Z') return cut();
      }
    });
    const end = () => {
      client.destroy();
      server.destroy();
      this.#sockets.delete(client);
      this.#sockets.delete(server);
    };
    client.on('close', end).on('error', end);
    server.on('close', end).on('error', end);
  }
}
