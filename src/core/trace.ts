// Trace context: every event stores a trace id, and handlers run inside their event's trace so
// that events they record, and their log lines, carry it on. OpenTelemetry is used when active.
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomHex } from './random.js';
import { context, createContextKey, ROOT_CONTEXT, trace, TraceFlags } from '@opentelemetry/api';

export interface TraceScope {
  traceId: string;
  eventId?: string;
  handler?: string;
  attempt?: number;
}

const storage = new AsyncLocalStorage<TraceScope>();

const TRACE_ID = /^[0-9a-f]{32}$/;
const HEX_32 = /^[0-9a-fA-F]{32}$/;
const ZERO_TRACE_ID = '0'.repeat(32);

/**
 * A trace id as rea keeps it. Any text is rea's own correlation id (stored, searched, in every
 * log line); 32 hex digits are a W3C trace id, written in lower case as W3C and OpenTelemetry
 * write it. An upper-case one was stored as given and never became the handler's OpenTelemetry
 * parent (nor matched the span's id in a trace backend): it is lower-cased instead.
 */
export function normalizeTraceId(traceId: string): string {
  return HEX_32.test(traceId) ? traceId.toLowerCase() : traceId;
}

/** The id as an OpenTelemetry parent, or null: only a W3C trace id (32 hex digits, not all zeros) is one. */
export function w3cTraceId(traceId: string): string | null {
  const id = normalizeTraceId(traceId);
  return TRACE_ID.test(id) && id !== ZERO_TRACE_ID ? id : null;
}

export function newTraceId(): string {
  return randomHex(16);
}

/**
 * A job's trace scope: its event's trace id, or, for an event stored without one (a capture
 * trigger's, a row inserted by hand), one derived from the event's id: the 32 hex digits of a
 * UUID are a valid W3C trace id, and every attempt and every handler of that event then shares
 * it, so their log lines and the events they record stay one trace across retries. Worked out
 * when first asked for (an event the handler records, a log line, OpenTelemetry); most jobs never ask.
 */
export class JobTraceScope implements TraceScope {
  #traceId: string | null;
  constructor(traceId: string | null, readonly eventId: string, readonly handler: string, readonly attempt: number) {
    // Normalised here too: a row written by hand, or stored before record() lower-cased them.
    this.#traceId = traceId === null ? null : normalizeTraceId(traceId);
  }

  get traceId(): string {
    return (this.#traceId ??= traceIdOfEvent(this.eventId));
  }
}

/** The trace id of an event stored without one: its id's hex digits (a new one for an id that is no UUID). */
export function traceIdOfEvent(eventId: string): string {
  const hex = eventId.replace(/-/g, '').toLowerCase();
  return TRACE_ID.test(hex) && hex !== ZERO_TRACE_ID ? hex : newTraceId();
}

/** The trace id in effect: a rea handler's event, else the active OpenTelemetry span, else none. */
export function currentTraceId(): string | null {
  const scope = storage.getStore();
  if (scope) return scope.traceId;
  const span = trace.getActiveSpan();
  const id = span?.spanContext().traceId;
  return id ? w3cTraceId(id) : null;
}

export function currentScope(): TraceScope | undefined {
  return storage.getStore();
}

const PROBE = createContextKey('rea.context-manager-probe');
/** How long the answer of otelContextManager() is kept. */
const PROBE_EVERY_MS = 100;
let probedAt = -Infinity;
let managed = false;

/**
 * Whether an OpenTelemetry context manager is registered (an SDK is set up): without one,
 * context.with() runs its function in no context at all, so nothing could see a span context
 * rea made. Asked at most every PROBE_EVERY_MS; an SDK registered later is seen from then on.
 */
function otelContextManager(): boolean {
  const now = performance.now();
  if (now - probedAt >= PROBE_EVERY_MS) {
    probedAt = now;
    const probe = ROOT_CONTEXT.setValue(PROBE, true);
    managed = context.with(probe, () => context.active() === probe);
  }
  return managed;
}

/** Run fn in a trace scope; OpenTelemetry instrumentation inside sees the event's trace as its parent. */
export function runInTrace<T>(scope: TraceScope, fn: () => T): T {
  // Without a context manager a span context would go nowhere: skip making one (it cost a
  // context copy and a random span id per job).
  if (!otelContextManager()) return storage.run(scope, fn);
  let otelContext = context.active();
  // Any other trace id (an order number, a request id) is rea's alone: its log lines carry it, but
  // it cannot be an OpenTelemetry trace, so the handler's spans get no parent from it.
  const parent = w3cTraceId(scope.traceId);
  if (parent !== null) {
    otelContext = trace.setSpanContext(otelContext, {
      traceId: parent,
      spanId: randomHex(8),
      traceFlags: TraceFlags.SAMPLED,
      isRemote: true,
    });
  }
  return context.with(otelContext, () => storage.run(scope, fn));
}
