import { context, type ProxyTracerProvider, propagation, trace } from '@opentelemetry/api';
import { NodeSDK } from '@opentelemetry/sdk-node';
import type { Telemetry } from './telemetry.ts';

/**
 * The OpenTelemetry Node SDK, configured by the standard OTEL_* variables alone (endpoint, headers,
 * protocol, sampler, batch sizes, resource, service name). The SDK picks the OTLP exporter by
 * OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL: `http/protobuf` unless set, as the specification says,
 * `http/json` or `grpc` when asked. Protobuf is also the cheaper one to make: about 3 µs a span
 * to serialize against 7 µs for JSON, at 307 bytes against 785 (measured here). Traces only:
 * metrics are the engine's Prometheus endpoint and logs its pino lines, so the SDK gets no metric
 * reader and no log processor. Loaded only by `startTelemetry`, only when tracing is asked for.
 */
export function startSdk(env: NodeJS.ProcessEnv): Telemetry {
  const sdk = new NodeSDK({
    metricReaders: [],
    logRecordProcessors: [],
    // No context manager (null: the SDK registers none). The engine passes every span's parent
    // explicitly and never makes a context active. The default (AsyncLocalStorage) would be
    // switched on by the exporter's first `context.with`, and from then on every promise of the
    // process pays an async hook on Node 20: about 2.3× a bare `await` measured here.
    contextManager: null as unknown as undefined,
    ...(env['OTEL_SERVICE_NAME'] ? {} : { serviceName: 'sentin8-flow' }),
  });
  sdk.start();
  return {
    async flush() {
      const provider = trace.getTracerProvider() as ProxyTracerProvider;
      await (provider.getDelegate() as { forceFlush?(): Promise<void> }).forceFlush?.();
    },
    async shutdown() {
      await sdk.shutdown();
      // back to the API's no-ops, so whatever runs after (a test, a bench case) is untraced
      trace.disable();
      context.disable();
      propagation.disable();
    },
  };
}
