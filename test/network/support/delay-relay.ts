import { readFileSync } from 'node:fs';
import { connect, createServer, type Socket } from 'node:net';

/**
 * A TCP relay that adds a one-way delay to each direction of every connection:
 * `delay-relay.ts <listen host> <port> <target host> <target port> <delay file>`. Every chunk is
 * passed on DELAY ms after it arrived, in order, so the round trip through the relay grows by
 * 2 × DELAY while bandwidth stays as it was. It stands in for `tc netem delay` on kernels built
 * without sch_netem. The delay is read from the file at start and again on SIGHUP.
 */
const [host, port, targetHost, targetPort, delayFile] = process.argv.slice(2);
let delayMs = 0;
const readDelay = () => {
  delayMs = Number(readFileSync(delayFile!, 'utf8').trim() || 0);
};
readDelay();
process.on('SIGHUP', readDelay);

/** Writes `chunk` to `to` delayMs after it arrived, never before an earlier chunk. */
function forward(from: Socket, to: Socket): void {
  let last = 0;
  from.on('data', (chunk: Buffer) => {
    if (delayMs === 0) return void to.write(chunk);
    const due = Math.max(Date.now() + delayMs, last);
    last = due;
    setTimeout(() => to.write(chunk), due - Date.now());
  });
  from.on('end', () => setTimeout(() => to.end(), Math.max(0, last - Date.now())));
  from.on('error', () => to.destroy());
  from.on('close', () => setTimeout(() => to.destroy(), Math.max(0, last - Date.now()) + 1));
}

createServer((client) => {
  client.setNoDelay(true);
  const server = connect(Number(targetPort), targetHost);
  server.setNoDelay(true);
  forward(client, server);
  forward(server, client);
}).listen(Number(port), host, () => console.log(`relay ready on ${host}:${port}`));
