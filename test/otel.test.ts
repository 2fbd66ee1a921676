// OpenTelemetry: a handler runs with its event's trace as the remote parent span context when an
// OpenTelemetry context manager is registered (an SDK), including one registered after rea
// started; without one rea makes no span context (it could go nowhere), and its own trace scope
// still carries the trace id. The parent is the span that recorded the event where it was stored.
import { context, trace, TraceFlags, type SpanContext } from '@opentelemetry/api';
import { afterEach, describe, expect, it } from 'vitest';
import { LazyLogger } from '../src/core/logger.js';
import { activeSpanContext, currentTraceId, jobLogLine, JobTraceScope, runInTrace, spanInTrace, type TraceScope } from '../src/core/trace.js';
import { AlsContextManager, instrumentPino, keysOf, pinoLines, TestTracer } from './helpers/otel.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const TRACE = 'ab'.repeat(16);

/** What a handler inside runInTrace would see. */
async function seen(scope: TraceScope = { traceId: TRACE, eventId: 'e1', handler: 'h', attempt: 1 }) {
  return runInTrace(scope, async () => {
    await sleep(1); // across an await, as a handler's own instrumentation would be
    const span = trace.getSpanContext(context.active());
    return { traceId: currentTraceId(), parent: span && { traceId: span.traceId, isRemote: span.isRemote, spanId: span.spanId, traceFlags: span.traceFlags } };
  });
}

describe('trace context for OpenTelemetry', () => {
  afterEach(() => {
    context.disable();
  });

  it('with no context manager there is no span context, and the trace id still comes from the event', async () => {
    expect(await seen()).toEqual({ traceId: TRACE, parent: undefined });
  });

  it('with a context manager, even one registered after jobs ran, handlers see the event trace as their remote parent', async () => {
    await seen(); // rea has already asked whether there is one
    expect(context.setGlobalContextManager(new AlsContextManager())).toBe(true);
    await sleep(150); // past the time rea keeps its answer
    const inside = await seen();
    expect(inside.traceId).toBe(TRACE);
    expect(inside.parent).toMatchObject({ traceId: TRACE, isRemote: true });
    expect(inside.parent!.spanId).toMatch(/^[0-9a-f]{16}$/);
  });

  it('a W3C trace id in upper case links as the parent, lower-cased; any other trace id is rea\'s alone, with no parent', async () => {
    expect(context.setGlobalContextManager(new AlsContextManager())).toBe(true);
    await sleep(150); // past the time rea keeps its answer (an earlier test may have asked)
    // An upper-case id was kept as the handler's trace and never made its parent: its spans began a trace of their own.
    const upper = await seen(new JobTraceScope(TRACE.toUpperCase(), 'e1', 'h', 1));
    expect(upper.traceId).toBe(TRACE);
    expect(upper.parent).toMatchObject({ traceId: TRACE, isRemote: true });
    // Not a W3C trace id: logs and the events the handler records carry it; OpenTelemetry has nothing to link.
    for (const traceId of ['order-42', '0'.repeat(32), `${TRACE.slice(0, 30)}xy`]) {
      expect(await seen(new JobTraceScope(traceId, 'e1', 'h', 1)), traceId).toEqual({ traceId, parent: undefined });
    }
  });
});

describe('the span that recorded the event as the parent', () => {
  const RECORDED = '0123456789abcdef';
  afterEach(() => {
    context.disable();
  });
  const managed = async () => {
    expect(context.setGlobalContextManager(new AlsContextManager())).toBe(true);
    await sleep(150); // past the time rea keeps its answer (an earlier test may have asked)
  };

  it('is the remote parent as it was stored, its flags kept: an unsampled one stays unsampled', async () => {
    await managed();
    for (const traceFlags of [TraceFlags.SAMPLED, TraceFlags.NONE]) {
      const inside = await seen(new JobTraceScope(TRACE, 'e1', 'h', 1, { spanId: RECORDED, traceFlags }));
      expect(inside.parent).toEqual({ traceId: TRACE, spanId: RECORDED, traceFlags, isRemote: true });
    }
  });

  it('without one stored (or one no span could have), a made-up span id, sampled; none for an event stored without a trace id', async () => {
    await managed();
    for (const span of [null, { spanId: 'xyz', traceFlags: 1 }, { spanId: '0'.repeat(16), traceFlags: 1 }, { spanId: RECORDED, traceFlags: 300 }]) {
      const inside = await seen(new JobTraceScope(TRACE, 'e1', 'h', 1, span));
      expect(inside.parent, JSON.stringify(span)).toMatchObject({ traceId: TRACE, traceFlags: TraceFlags.SAMPLED, isRemote: true });
      expect(inside.parent!.spanId).toMatch(/^[0-9a-f]{16}$/);
      expect(inside.parent!.spanId).not.toBe(RECORDED);
    }
    // Traced by its id: a span stored beside no trace id is of no trace rea knows.
    const eventId = '0190a3c4-5b6d-7e8f-9a0b-1c2d3e4f5a6b';
    const byId = await seen(new JobTraceScope(null, eventId, 'h', 1, { spanId: RECORDED, traceFlags: 0 }));
    expect(byId.parent).toMatchObject({ traceId: eventId.replace(/-/g, ''), traceFlags: TraceFlags.SAMPLED });
    expect(byId.parent!.spanId).not.toBe(RECORDED);
  });

  it('what record() stores: the active span in the event\'s trace; in a handler, its parent, unless rea made that up', async () => {
    await managed();
    const tracer = new TestTracer();
    tracer.sampleRoots = false;
    tracer.startActiveSpan('request', (span) => {
      const active = activeSpanContext();
      expect(active).toBe(span.spanContext());
      const own = span.spanContext();
      expect(spanInTrace(active, own.traceId)).toMatchObject({ spanId: own.spanId, traceFlags: TraceFlags.NONE });
      expect(spanInTrace(active, TRACE)).toBeNull(); // a trace id of its own: the span is of another trace
      expect(spanInTrace(null, TRACE)).toBeNull();
      span.end();
    });
    // In a handler whose parent is the stored span, with no span of the user's: that span.
    const stored = await runInTrace(new JobTraceScope(TRACE, 'e1', 'h', 1, { spanId: RECORDED, traceFlags: 0 }), async () => {
      await sleep(1);
      return spanInTrace(activeSpanContext(), currentTraceId()!);
    });
    expect(stored).toMatchObject({ spanId: RECORDED, traceFlags: 0 });
    // Under a made-up parent: none; under the user's own span there, that span.
    const [madeUp, own] = await runInTrace(new JobTraceScope(TRACE, 'e1', 'h', 1), async () => {
      await sleep(1);
      const first = spanInTrace(activeSpanContext(), currentTraceId()!);
      return [first, tracer.startActiveSpan('work', (span) => [span.spanContext(), spanInTrace(activeSpanContext(), currentTraceId()!)] as const)] as const;
    });
    expect(madeUp).toBeNull();
    const [work, stores] = own as readonly [SpanContext, unknown];
    expect(work.traceId).toBe(TRACE);
    expect(stores).toMatchObject({ spanId: work.spanId, traceFlags: TraceFlags.SAMPLED });
  });
});

describe('a job\'s trace scope', () => {
  it('is its event\'s trace; for an event stored without one, its id as the trace id, the same for every run', async () => {
    expect(new JobTraceScope(TRACE, 'e1', 'h', 1).traceId).toBe(TRACE);
    const eventId = '0190a3c4-5b6d-7e8f-9a0b-1c2d3e4f5a6b';
    const scope = new JobTraceScope(null, eventId, 'h', 1);
    const seenInside = await runInTrace(scope, async () => {
      const first = currentTraceId();
      await sleep(1);
      return [first, currentTraceId()];
    });
    expect(seenInside).toEqual(['0190a3c45b6d7e8f9a0b1c2d3e4f5a6b', '0190a3c45b6d7e8f9a0b1c2d3e4f5a6b']);
    // Another attempt, another handler: the same trace.
    expect(new JobTraceScope(null, eventId, 'other', 2).traceId).toBe(scope.traceId);
    // An id that is no UUID still gives a valid trace id, one per run.
    const odd = new JobTraceScope(null, 'e3', 'h', 1).traceId;
    expect(odd).toMatch(/^[0-9a-f]{32}$/);
    expect(new JobTraceScope(null, 'e3', 'h', 1).traceId).not.toBe(odd);
  });
});

describe('a job\'s log lines', () => {
  afterEach(() => {
    context.disable();
  });
  const RECORDED = '0123456789abcdef';
  const managed = async () => {
    expect(context.setGlobalContextManager(new AlsContextManager())).toBe(true);
    await sleep(150); // past the time rea keeps its answer (an earlier test may have asked)
  };

  /**
   * A job's logger as the worker makes it, on pino with OpenTelemetry's pino instrumentation, and
   * its lines as written, parsed once checked that no key was written twice.
   */
  function jobLog(scope: JobTraceScope) {
    const written: string[] = [];
    const log = new LazyLogger(instrumentPino(pinoLines(written)), { event_id: scope.eventId, handler: scope.handler }, jobLogLine(scope));
    const lines = () => written.map((text) => {
      const keys = keysOf(text);
      expect(keys, text).toEqual([...new Set(keys)]);
      return JSON.parse(text) as Record<string, unknown>;
    });
    return { log, lines };
  }

  /** Log `write` in the job's handler, across an await. */
  const inHandler = (scope: JobTraceScope, write: () => void) => runInTrace(scope, async () => {
    await sleep(1);
    write();
  });

  it('without OpenTelemetry, carry rea\'s trace id, as they always did, and no span', async () => {
    for (const traceId of [TRACE, 'order-42']) {
      const scope = new JobTraceScope(traceId, 'e1', 'h', 1);
      const { log, lines } = jobLog(scope);
      await inHandler(scope, () => log.info({ step: 'a' }, 'inside'));
      expect(lines()).toEqual([expect.objectContaining({ trace_id: traceId, event_id: 'e1', handler: 'h', step: 'a', msg: 'inside' })]);
      expect(lines()[0]).not.toHaveProperty('span_id');
      expect(lines()[0]).not.toHaveProperty('rea_trace_id');
    }
  });

  it('with OpenTelemetry, carry the ids of the span active in the handler, its flags as the instrumentation writes them', async () => {
    await managed();
    const tracer = new TestTracer();
    for (const traceFlags of [TraceFlags.SAMPLED, TraceFlags.NONE]) {
      const scope = new JobTraceScope(TRACE, 'e1', 'h', 1, { spanId: RECORDED, traceFlags });
      const { log, lines } = jobLog(scope);
      let own: SpanContext | undefined;
      await inHandler(scope, () => {
        log.info({ step: 'parent' });
        tracer.startActiveSpan('work', (span) => {
          own = span.spanContext();
          log.child({ part: 1 }).info({ step: 'own' });
          span.end();
        });
      });
      const flags = traceFlags === TraceFlags.SAMPLED ? '01' : '00';
      expect(lines()).toEqual([
        expect.objectContaining({ step: 'parent', trace_id: TRACE, span_id: RECORDED, trace_flags: flags }),
        expect.objectContaining({ step: 'own', part: 1, trace_id: TRACE, span_id: own!.spanId, trace_flags: flags }),
      ]);
    }
    // A parent rea made up (no span stored): its id, the one the handler's spans name as their parent.
    const scope = new JobTraceScope(TRACE, 'e1', 'h', 1);
    const { log, lines } = jobLog(scope);
    let parent: SpanContext | undefined;
    await inHandler(scope, () => {
      parent = trace.getSpanContext(context.active());
      log.warn({ step: 'made up' });
    });
    expect(lines()).toEqual([expect.objectContaining({ trace_id: TRACE, span_id: parent!.spanId, trace_flags: '01' })]);
  });

  it('an id that is no W3C one: alone with no span active, kept as rea_trace_id beside a span\'s', async () => {
    await managed();
    const tracer = new TestTracer();
    const scope = new JobTraceScope('order-42', 'e1', 'h', 1);
    const { log, lines } = jobLog(scope);
    let own: SpanContext | undefined;
    await inHandler(scope, () => {
      log.info({ step: 'plain' });
      tracer.startActiveSpan('work', (span) => {
        own = span.spanContext();
        log.info({ step: 'own' });
        span.end();
      });
    });
    const [plain, inSpan] = lines();
    expect(plain).toMatchObject({ step: 'plain', trace_id: 'order-42' });
    expect(Object.keys(plain!).filter((k) => /trace|span/.test(k))).toEqual(['trace_id']);
    expect(inSpan).toMatchObject({ step: 'own', trace_id: own!.traceId, span_id: own!.spanId, trace_flags: '01', rea_trace_id: 'order-42' });
  });

  it('written outside the handler (the worker\'s line on a failure), rea\'s trace id and not the ids of the span the code runs under', async () => {
    await managed();
    const tracer = new TestTracer();
    const scope = new JobTraceScope(TRACE, 'e1', 'h', 1, { spanId: RECORDED, traceFlags: 1 });
    const { log, lines } = jobLog(scope);
    const boot = tracer.startActiveSpan('boot', (span) => {
      log.warn({ step: 'after' }, 'job failed; will retry');
      span.end();
      return span.spanContext();
    });
    expect(lines()).toEqual([expect.objectContaining({ step: 'after', trace_id: TRACE })]);
    expect(lines()[0]).not.toHaveProperty('span_id');
    expect(boot.traceId).not.toBe(TRACE);
  });

  it('take pino\'s other forms of a line: a message alone, an Error', async () => {
    await managed();
    const scope = new JobTraceScope(TRACE, 'e1', 'h', 1, { spanId: RECORDED, traceFlags: 1 });
    const { log, lines } = jobLog(scope);
    await inHandler(scope, () => {
      (log.info as (msg: unknown) => void)('just a message'); // plain JavaScript, as pino takes it
      log.error(new Error('broke'));
      log.error(new Error('broke again'), 'said so');
    });
    const ids = { trace_id: TRACE, span_id: RECORDED, trace_flags: '01' };
    expect(lines()).toEqual([
      expect.objectContaining({ ...ids, msg: 'just a message' }),
      expect.objectContaining({ ...ids, msg: 'broke', err: expect.objectContaining({ type: 'Error', message: 'broke' }) }),
      expect.objectContaining({ ...ids, msg: 'said so', err: expect.objectContaining({ message: 'broke again' }) }),
    ]);
  });
});
