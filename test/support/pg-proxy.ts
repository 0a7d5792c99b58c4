import { createServer, type Server, type Socket, connect } from 'node:net';
import type { AddressInfo } from 'node:net';

/**
 * A TCP proxy in front of Postgres that can lose an answer the way a network does: armed with a
 * piece of SQL, it forwards the next statement that contains it, lets the server run it to the
 * end — ReadyForQuery, sent after an implicit transaction has committed — and then cuts both
 * connections without passing on a byte of the answer. The client sees its connection die; the
 * server has committed. A named (prepared) statement carries its text only when it is first
 * parsed on a connection, so the proxy remembers each connection's statements and knows a later
 * execution of one by its name.
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

  /** The next statement whose text contains `sql` (by text, or by the name it was prepared as) commits, and its answer is lost. */
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
    const sent = new FrontendReader();
    const cut = () => {
      this.cuts++;
      client.destroy();
      server.destroy();
    };
    client.on('data', (chunk: Buffer) => {
      const texts = sent.read(chunk);
      if (this.#armed !== null && texts.some((text) => text.includes(this.#armed!))) {
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

/**
 * Reads what a client sends (after its startup message) and returns the SQL each chunk runs: a
 * simple query's text, a Parse's text, and for a Bind the text of the statement it names, as
 * parsed earlier on the same connection (the unnamed statement is the last one parsed unnamed).
 */
class FrontendReader {
  #buffer = Buffer.alloc(0);
  #startup = true;
  readonly #statements = new Map<string, string>();

  read(chunk: Buffer): string[] {
    this.#buffer = Buffer.concat([this.#buffer, chunk]);
    const texts: string[] = [];
    if (this.#startup) {
      if (this.#buffer.length < 4 || this.#buffer.length < this.#buffer.readInt32BE(0)) return texts;
      this.#buffer = this.#buffer.subarray(this.#buffer.readInt32BE(0));
      this.#startup = false;
    }
    while (this.#buffer.length >= 5 && this.#buffer.length >= 1 + this.#buffer.readInt32BE(1)) {
      const type = String.fromCharCode(this.#buffer[0]!);
      const body = this.#buffer.subarray(5, 1 + this.#buffer.readInt32BE(1));
      this.#buffer = this.#buffer.subarray(1 + this.#buffer.readInt32BE(1));
      const strings = (n: number) => body.toString('utf8').split('\0').slice(0, n);
      if (type === 'Q') texts.push(strings(1)[0]!);
      if (type === 'P') {
        const [name, text] = strings(2) as [string, string];
        this.#statements.set(name, text);
        texts.push(text);
      }
      if (type === 'B') texts.push(this.#statements.get(strings(2)[1]!) ?? '');
    }
    return texts;
  }
}
