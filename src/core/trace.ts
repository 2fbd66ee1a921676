// Trace context: every event stores a trace id, and handlers run inside their event's trace so
// that events they record, and their log lines, carry it on. OpenTelemetry is used when active.
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomHex } from './random.js';
import { context, createContextKey, isSpanContextValid, ROOT_CONTEXT, trace, TraceFlags, type SpanContext } from '@opentelemetry/api';
import type { LineWriter } from './logger.js';

/** The OpenTelemetry span that recorded an event, in the event's trace: its handlers' parent. */
export interface EventSpan {
  /** 16 lower-case hex digits, not all zeros. */
  spanId: string;
  /** Its W3C trace flags (bit 0: sampled), 0-255. */
  traceFlags: number;
}

export interface TraceScope {
  traceId: string;
  eventId?: string;
  handler?: string;
  attempt?: number;
  /** The span that recorded the event, where it was stored: the OpenTelemetry parent in runInTrace. */
  span?: EventSpan | null;
}

const storage = new AsyncLocalStorage<TraceScope>();

const TRACE_ID = /^[0-9a-f]{32}$/;
const HEX_32 = /^[0-9a-fA-F]{32}$/;
const ZERO_TRACE_ID = '0'.repeat(32);
const SPAN_ID = /^[0-9a-f]{16}$/;
const ZERO_SPAN_ID = '0'.repeat(16);
/** Parents runInTrace made up: an event recorded under one stores no span (see spanInTrace). */
const madeUp = new WeakSet<SpanContext>();

/** A span id and trace flags as OpenTelemetry and W3C take them (a row written by hand may hold anything). */
function validSpan(spanId: unknown, traceFlags: unknown): boolean {
  return typeof spanId === 'string' && SPAN_ID.test(spanId) && spanId !== ZERO_SPAN_ID
    && Number.isInteger(traceFlags) && (traceFlags as number) >= 0 && (traceFlags as number) <= 255;
}

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
  readonly #stored: string | null;
  #traceId: string | undefined;
  /** The span that recorded the event; none for an event stored without a trace id (its span could be of no trace we know). */
  readonly span: EventSpan | null;
  constructor(traceId: string | null, readonly eventId: string, readonly handler: string, readonly attempt: number, span: EventSpan | null = null) {
    this.#stored = traceId;
    this.span = traceId === null ? null : span;
  }

  get traceId(): string {
    // Normalised here too (a row written by hand, or stored before record() lower-cased them),
    // when first asked for: a regular expression per job was ~2 % of a no-op handler's cost.
    return (this.#traceId ??= this.#stored === null ? traceIdOfEvent(this.eventId) : normalizeTraceId(this.#stored));
  }
}

/** The trace id of an event stored without one: its id's hex digits (a new one for an id that is no UUID). */
export function traceIdOfEvent(eventId: string): string {
  const hex = eventId.replace(/-/g, '').toLowerCase();
  return TRACE_ID.test(hex) && hex !== ZERO_TRACE_ID ? hex : newTraceId();
}

/** The active OpenTelemetry span's context, or null: record() asks once per call (recordMany too). */
export function activeSpanContext(): SpanContext | null {
  return trace.getActiveSpan()?.spanContext() ?? null;
}

/** The trace id in effect: a rea handler's event, else the active OpenTelemetry span's (`active`), else none. */
export function currentTraceId(active: SpanContext | null = activeSpanContext()): string | null {
  const scope = storage.getStore();
  if (scope) return scope.traceId;
  const id = active?.traceId;
  return id ? w3cTraceId(id) : null;
}

/**
 * The span an event recorded in trace `traceId` stores, given the active span context: that
 * span when it is in the same trace, else none (a span of another trace cannot be the parent of
 * this one's spans). In a handler with no span of the user's own active, the active one is the
 * handler's parent, so the event stores the span that recorded the handler's event; but not a
 * parent runInTrace made up, which no backend has ever seen: the event then stores none.
 */
export function spanInTrace(active: SpanContext | null, traceId: string): EventSpan | null {
  if (active === null || active.traceId !== traceId || madeUp.has(active)) return null;
  return validSpan(active.spanId, active.traceFlags) ? active : null;
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

/**
 * Run fn in a trace scope; OpenTelemetry instrumentation inside sees as its remote parent the span
 * that recorded the event, sampled or not as that span was.
 */
export function runInTrace<T>(scope: TraceScope, fn: () => T): T {
  // Without a context manager a span context would go nowhere: skip making one (it cost a
  // context copy and a random span id per job).
  if (!otelContextManager()) return storage.run(scope, fn);
  // From the root, not context.active(): the worker's loops inherit the context bus.start() (or
  // the wake-up of a request) was called in, and its span and baggage would be every handler's.
  let otelContext = ROOT_CONTEXT;
  // Any other trace id (an order number, a request id) is rea's alone: its log lines carry it, but
  // it cannot be an OpenTelemetry trace, so the handler's spans get no parent from it.
  const traceId = w3cTraceId(scope.traceId);
  if (traceId !== null) {
    const span = scope.span;
    let parent: SpanContext;
    if (span && validSpan(span.spanId, span.traceFlags)) {
      parent = { traceId, spanId: span.spanId, traceFlags: span.traceFlags, isRemote: true };
    } else {
      // No span stored: a trace id given to record() with no span of it active (one taken from a
      // message or a header), one rea made (no span was active, or a capture trigger's row traced
      // by its id), or a row stored before spans were. A trace needs a parent span context to
      // carry its id into the handler's spans, so one is made up (a backend shows it as a missing
      // parent). Sampled: no sampling decision was ever made for this trace that rea could
      // honour, and unsampled, a parent-based sampler (the SDK's default) would drop every span of
      // the handler, which were always recorded before.
      parent = { traceId, spanId: randomHex(8), traceFlags: TraceFlags.SAMPLED, isRemote: true };
      madeUp.add(parent);
    }
    otelContext = trace.setSpanContext(otelContext, parent);
  }
  return context.with(otelContext, () => storage.run(scope, fn));
}

/**
 * How a job's log lines are written (its ctx.log, and rea's own lines about it). In its handler
 * (inside runInTrace for `scope`) with a span active, a line carries that span's ids: `trace_id`,
 * `span_id` and `trace_flags`, written as OpenTelemetry's pino instrumentation writes them, so a
 * trace backend ties the line to the span (the handler's own span when one is active, else its
 * parent). The instrumentation adds the same keys from the same span, and pino writes a line's
 * own keys over its mixin's, so each is written once: as a binding, rea's trace_id was written
 * beside the instrumentation's, and the two differed for an id that is no W3C one. rea's trace id,
 * when the span's differs (an id such as `order-42`, or a span the handler began a trace with),
 * is kept as `rea_trace_id`: a trace_id that is not the span's would tie the line to no trace.
 * With no span active (no OpenTelemetry, or an id that is no W3C one and no span of the
 * handler's), `trace_id` is rea's, as it always was.
 *
 * A line written outside the handler (the worker's, after it failed) is about the job, not about
 * the span its code runs under (the context bus.start() was called in): rea's trace id, written
 * outside any OpenTelemetry context, so that no instrumentation adds that span's ids to it.
 */
export function jobLogLine(scope: TraceScope): LineWriter {
  return (write) => {
    const active = trace.getSpanContext(context.active());
    if (active === undefined || !isSpanContextValid(active)) {
      write({ trace_id: scope.traceId });
    } else if (storage.getStore() !== scope) {
      context.with(ROOT_CONTEXT, () => write({ trace_id: scope.traceId }));
    } else {
      const fields: Record<string, string> = {
        trace_id: active.traceId, span_id: active.spanId, trace_flags: active.traceFlags.toString(16).padStart(2, '0'),
      };
      if (scope.traceId !== active.traceId) fields.rea_trace_id = scope.traceId;
      write(fields);
    }
  };
}
