// Trace context: every event stores a trace id, and handlers run inside their event's trace so
// that events they record, and their log lines, carry it on. OpenTelemetry is used when active.
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomHex } from './random.js';
import { context, trace, TraceFlags } from '@opentelemetry/api';

export interface TraceScope {
  traceId: string;
  eventId?: string;
  handler?: string;
  attempt?: number;
}

const storage = new AsyncLocalStorage<TraceScope>();

const TRACE_ID = /^[0-9a-f]{32}$/;

export function newTraceId(): string {
  return randomHex(16);
}

/** The trace id in effect: a rea handler's event, else the active OpenTelemetry span, else none. */
export function currentTraceId(): string | null {
  const scope = storage.getStore();
  if (scope) return scope.traceId;
  const span = trace.getActiveSpan();
  const id = span?.spanContext().traceId;
  return id && TRACE_ID.test(id) && id !== '0'.repeat(32) ? id : null;
}

export function currentScope(): TraceScope | undefined {
  return storage.getStore();
}

/** Run fn in a trace scope; OpenTelemetry instrumentation inside sees the event's trace as its parent. */
export function runInTrace<T>(scope: TraceScope, fn: () => T): T {
  let otelContext = context.active();
  if (TRACE_ID.test(scope.traceId)) {
    otelContext = trace.setSpanContext(otelContext, {
      traceId: scope.traceId,
      spanId: randomHex(8),
      traceFlags: TraceFlags.SAMPLED,
      isRemote: true,
    });
  }
  return context.with(otelContext, () => storage.run(scope, fn));
}
