import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTelemetry } from '../cli/telemetry.ts';

const START = Buffer.from('"startTimeUnixNano"');

/**
 * Runs `work` with tracing on as `s8flow start` turns it on (cli/telemetry.ts): every span
 * sampled (OTEL_TRACES_SAMPLER=always_on) and exported over OTLP/HTTP to a receiver in this
 * process, which counts the spans of each request. Tracing is off again when it returns
 * (the SDK shut down, the API back to its no-ops), so the cases before and after run untraced.
 */
export async function traced<T>(work: () => Promise<T>): Promise<{ result: T; spans: number }> {
  let spans = 0;
  const receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      // counted, not parsed: a collector runs in a process of its own, and parsing here would
      // charge its work to the engine's rate (each span has one start time)
      const body = Buffer.concat(chunks);
      for (let at = body.indexOf(START); at >= 0; at = body.indexOf(START, at + 1)) spans++;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const saved = { ...process.env };
  process.env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'] = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/v1/traces`;
  process.env['OTEL_TRACES_SAMPLER'] = 'always_on';
  const telemetry = await startTelemetry();
  if (telemetry === null) throw new Error('tracing did not start');
  try {
    const result = await work();
    await telemetry.flush();
    return { result, spans };
  } finally {
    await telemetry.shutdown();
    process.env = saved;
    await new Promise((resolve) => receiver.close(resolve));
  }
}
