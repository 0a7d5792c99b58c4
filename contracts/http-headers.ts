/**
 * Headers a workflow's own `http` step may not set. The transport owns the framing and hop-by-hop
 * headers (a `Host` of the author's choosing would reach a virtual host the allowlist never named),
 * and the engine owns its contract headers (ARCHITECTURE.md, Contracts: outbound calls), which an
 * owning service trusts to say which instance, step and attempt is calling.
 */
const RESERVED = new Set([
  'host',
  'connection',
  'content-length',
  'transfer-encoding',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'te',
  'trailer',
  'upgrade',
  'expect',
  'idempotency-key',
  // W3C trace context: the engine sends the attempt's own (engine/tracing.ts)
  'traceparent',
  'tracestate',
]);

/** True for a header name an `http` step may not set (case-insensitive); every `x-flow-*` is the engine's. */
export function isReservedHeader(name: string): boolean {
  const n = name.trim().toLowerCase();
  return RESERVED.has(n) || n.startsWith('x-flow-');
}

/** `headers` without the reserved ones: a version published before the rule cannot escape it. */
export function withoutReservedHeaders(headers: Readonly<Record<string, string>> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers ?? {})) if (!isReservedHeader(k)) out[k] = v;
  return out;
}
