import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createFlowClient } from '../../client/index.ts';
import { contextOf } from '../../engine/tracing.ts';

// What an owning service's OpenTelemetry SDK registers: a context manager and the W3C propagator.
beforeAll(() => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
});
afterAll(() => {
  context.disable();
  propagation.disable();
});

it("the client sends the caller's active trace context, so a start continues the caller's trace", async () => {
  const sent: Headers[] = [];
  const fetch = (async (_url: string, init: RequestInit) => {
    sent.push(new Headers(init.headers));
    return new Response(JSON.stringify({ id: 'w-1' }), { status: 201, headers: { 'content-type': 'application/json' } });
  }) as typeof globalThis.fetch;
  const flow = createFlowClient({ baseUrl: 'http://127.0.0.1:1', token: 't', fetch });
  const caller = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  await context.with(contextOf(caller), () => flow.start({ logicId: 'payments.capture', input: {} }));
  await flow.start({ logicId: 'payments.capture', input: {} });
  expect(sent.map((h) => h.get('traceparent'))).toEqual([caller, null]);
  expect(trace.getActiveSpan()).toBeUndefined();
});
