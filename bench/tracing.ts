import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTelemetry } from '../cli/telemetry.ts';

const START = Buffer.from('"startTimeUnixNano"');

/** Spans in an OTLP/HTTP JSON body: each has one start time. */
function jsonSpans(body: Buffer): number {
  let n = 0;
  for (let at = body.indexOf(START); at >= 0; at = body.indexOf(START, at + 1)) n++;
  return n;
}

/**
 * Spans in an OTLP/HTTP protobuf body (ExportTraceServiceRequest), found by walking the wire
 * format without decoding: request field 1 is a ResourceSpans, whose field 2 is a ScopeSpans,
 * whose field 2 is a Span. Every other field is skipped by its wire type.
 */
function protobufSpans(body: Buffer): number {
  const walk = (from: number, to: number, depth: number): number => {
    let n = 0;
    let at = from;
    const varint = () => {
      let v = 0;
      for (let shift = 0; ; shift += 7) {
        const b = body[at++]!;
        v += (b & 0x7f) * 2 ** shift;
        if (b < 0x80) return v;
      }
    };
    while (at < to) {
      const tag = varint();
      const field = Math.floor(tag / 8);
      const type = tag & 7;
      if (type === 0) varint();
      else if (type === 1) at += 8;
      else if (type === 5) at += 4;
      else if (type === 2) {
        const len = varint();
        const wanted = depth === 0 ? field === 1 : field === 2;
        if (wanted) n += depth === 2 ? 1 : walk(at, at + len, depth + 1);
        at += len;
      } else throw new Error(`unexpected protobuf wire type ${type}`);
    }
    return n;
  };
  return walk(0, body.length, 0);
}
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
      // charge its work to the engine's rate
      const body = Buffer.concat(chunks);
      spans += String(req.headers['content-type']).startsWith('application/json') ? jsonSpans(body) : protobufSpans(body);
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
