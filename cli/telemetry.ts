/**
 * Tracing for `s8flow start`. The engine writes its spans through `@opentelemetry/api` alone
 * (engine/tracing.ts); with nothing registered they are the API's no-ops. This registers the
 * OpenTelemetry Node SDK with the OTLP/HTTP exporter, and loads it (`import()`) only when the
 * standard variables ask for traces: OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint set
 * (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). OTEL_SDK_DISABLED=true and
 * OTEL_TRACES_EXPORTER=none keep it off whatever else is set.
 */
export interface Telemetry {
  /** Exports the spans ended so far, now rather than at the next batch. */
  flush(): Promise<void>;
  /** Exports the spans still buffered, then unregisters the SDK (spans are no-ops again): call once, at exit. */
  shutdown(): Promise<void>;
}

/** Whether the OTEL_* variables ask for traces. */
export function tracingWanted(env: NodeJS.ProcessEnv): boolean {
  if (env['OTEL_SDK_DISABLED']?.trim().toLowerCase() === 'true') return false;
  const exporters = (env['OTEL_TRACES_EXPORTER'] ?? '').split(',').map((s) => s.trim().toLowerCase());
  if (exporters.includes('none')) return false;
  if (exporters.includes('otlp')) return true;
  return Object.entries(env).some(([k, v]) => /^OTEL_EXPORTER_OTLP_(TRACES_)?ENDPOINT$/.test(k) && (v ?? '').trim() !== '');
}

/**
 * Starts the SDK when the variables ask for traces, else loads nothing and returns null. `load`
 * is how the SDK module is reached (tests watch it). Call before the engine starts work, so the
 * first start is traced.
 */
export async function startTelemetry(
  env: NodeJS.ProcessEnv = process.env,
  load: () => Promise<{ startSdk(env: NodeJS.ProcessEnv): Telemetry }> = () => import('./telemetry-sdk.ts'),
): Promise<Telemetry | null> {
  if (!tracingWanted(env)) return null;
  return (await load()).startSdk(env);
}
