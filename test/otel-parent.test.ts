// The OpenTelemetry parent of a handler's spans is the span that recorded its event, sampled or not
// as that span was: stored by every way record() writes an event, and read back by every way a
// job reaches its handler (hand-off, claim, retry, inline). Events stored without a span (older
// rows, a trace id given without one, a capture trigger's) keep a made-up parent in their trace;
// a trace id that is no W3C one gives none.
import { context, propagation, trace, TraceFlags, type SpanContext } from '@opentelemetry/api';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { defineEvents, type Bus, type BusOptions } from '../src/index.js';
import { describeTargets, PG_URL, quickBackoff, testBus, type Target } from './helpers/db.js';
import { AlsContextManager, instrumentPino, keysOf, pinoLines, TestTracer, type TestSpan } from './helpers/otel.js';
import { deferred } from './helpers/signals.js';

const events = defineEvents({
  'order.created': z.object({ orderNo: z.string() }),
  'order.noted': z.object({ note: z.string() }),
});
type Schemas = typeof events.schemas;

const tracer = new TestTracer();

beforeAll(() => {
  expect(context.setGlobalContextManager(new AlsContextManager())).toBe(true);
});
afterAll(() => {
  context.disable();
});

/** The parent a handler's span has when its event was recorded under `span`. */
const parentFrom = (span: SpanContext) => ({ traceId: span.traceId, spanId: span.spanId, traceFlags: span.traceFlags, isRemote: true });

/** Register `name` on order.created: each run starts a span, as the handler's instrumentation would; resolves with the first that succeeds. */
function tracedHandler(bus: Bus<Schemas>, name: string, options: { failFirst?: boolean } = {}) {
  const ran = deferred<{ span: TestSpan; attempt: number }>();
  bus.on('order.created', name, (_e, ctx) => tracer.startActiveSpan(`handle ${name}`, (span) => {
    span.end();
    if (options.failFirst && ctx.attempt === 1) throw new Error('down once');
    ran.resolve({ span: span as TestSpan, attempt: ctx.attempt });
  }), { backoff: quickBackoff });
  return ran.promise;
}

/** Record one order.created inside a span of the application's (sampled unless `sampled` is false). */
async function recordInSpan(bus: Bus<Schemas>, sampled = true): Promise<{ span: SpanContext; id: string }> {
  tracer.sampleRoots = sampled;
  try {
    return await tracer.startActiveSpan('place order', async (span) => {
      const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'A' }, { subject: 'A' }));
      span.end();
      return { span: span.spanContext(), id };
    });
  } finally {
    tracer.sampleRoots = true;
  }
}

interface StoredTrace { type: string; trace_id: string | null; span_id: string | null; trace_flags: number | null }
const storedTraces = (target: Target, schema: string) =>
  target.query<StoredTrace>(`select type, trace_id, span_id, trace_flags from "${schema}".events order by id`);

describeTargets('the OpenTelemetry parent on $name', (target) => {
  const test = it.skipIf(!target.available);

  // [title, bus options, how the handler runs, how the relay round gives the job to the worker]
  const modes: [string, Partial<Omit<BusOptions<Schemas>, 'events'>>, { failFirst?: boolean; coalesce?: boolean }, string][] = [
    ['handed off by the relay', {}, {}, 'handed off'],
    ['claimed from the queue', { relay: { handOff: false } }, {}, 'queued'],
    ['retried (claimed again)', {}, { failFirst: true }, 'handed off'],
    ...(target.name === 'postgres' ? [
      ['delivered inline (lean round)', { relay: { inlineMs: 200 } }, {}, 'inline lean'],
      ['delivered inline (full round)', { relay: { inlineMs: 200 } }, { coalesce: true }, 'inline full'],
    ] as typeof modes : []),
  ];
  for (const [mode, options, how, expected] of modes) {
    test(`a handler's parent is the span that recorded its event: ${mode}`, async () => {
      const bus = await testBus(target, events, options);
      const ran = tracedHandler(bus, 'ship', { failFirst: how.failFirst });
      // A coalescing handler on the same type makes the inline round take its full statement.
      if (how.coalesce) bus.on('order.created', 'tally', () => {}, { coalesce: 'subject' });
      // How each relay round that fanned out events gave the jobs to the worker.
      const rounds: string[] = [];
      const executor = bus.driver.executor;
      const fanOut = executor.eventFanOut.bind(executor);
      executor.eventFanOut = async (q, p) => {
        const r = await fanOut(q, p);
        if (r.eventIds.length > 0) rounds.push(r.inline.length > 0 ? (r.lean ? 'inline lean' : 'inline full') : r.handedOff.length > 0 ? 'handed off' : 'queued');
        return r;
      };
      await bus.start();
      const { span, id } = await recordInSpan(bus);
      const { span: handled, attempt } = await ran;
      expect(attempt).toBe(how.failFirst ? 2 : 1);
      expect(handled.parent).toEqual(parentFrom(span));
      expect(handled.spanContext().traceId).toBe(span.traceId);
      expect(rounds).toEqual([expected]);
      // Named on the event once the round commits (after the handler ran).
      if (expected.startsWith('inline')) await expect.poll(async () => (await bus.events.get(id))!.deliveredInline).toContain('ship');
    });
  }

  test('an unsampled recording span gives an unsampled parent, and the handler\'s spans stay unsampled', async () => {
    const bus = await testBus(target, events);
    const ran = tracedHandler(bus, 'ship');
    await bus.start();
    const { span } = await recordInSpan(bus, false);
    expect(span.traceFlags).toBe(TraceFlags.NONE);
    const { span: handled } = await ran;
    expect(handled.parent).toEqual(parentFrom(span));
    expect(handled.spanContext().traceFlags).toBe(TraceFlags.NONE);
    expect(await storedTraces(target, bus.schema)).toEqual([
      { type: 'order.created', trace_id: span.traceId, span_id: span.spanId, trace_flags: TraceFlags.NONE },
    ]);
  });

  test('a row without a span (stored before migration 9, or by hand) still gets a parent in its trace: made up, sampled', async () => {
    const bus = await testBus(target, events);
    const ran = tracedHandler(bus, 'ship');
    await bus.start();
    const traceId = 'ab'.repeat(16);
    await target.query(
      `insert into "${bus.schema}".events (id, type, payload, trace_id) values ("${bus.schema}".uuid_v7(), 'order.created', '{"orderNo":"O"}', $1)`,
      [traceId],
    );
    bus.wake();
    const { span: handled } = await ran;
    expect(handled.parent).toMatchObject({ traceId, traceFlags: TraceFlags.SAMPLED, isRemote: true });
    expect(handled.parent!.spanId).toMatch(/^[0-9a-f]{16}$/);
    expect(handled.parent!.spanId).not.toBe('0'.repeat(16));
  });

  test('a trace id that is no W3C one gives the handler no parent, even when recorded inside a span', async () => {
    const bus = await testBus(target, events);
    const seen = deferred<{ handled: TestSpan; active: SpanContext | undefined }>();
    bus.on('order.created', 'ship', () => {
      const active = trace.getSpanContext(context.active());
      tracer.startActiveSpan('handle', (span) => {
        span.end();
        seen.resolve({ handled: span as TestSpan, active });
      });
    });
    await bus.start();
    const recording = await tracer.startActiveSpan('place order', async (span) => {
      await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'N' }, { traceId: 'order-42' }));
      span.end();
      return span.spanContext();
    });
    const { handled, active } = await seen.promise;
    expect(active).toBeUndefined();
    expect(handled.parent).toBeUndefined();
    expect(handled.spanContext().traceId).not.toBe(recording.traceId);
    expect(await storedTraces(target, bus.schema)).toEqual([{ type: 'order.created', trace_id: 'order-42', span_id: null, trace_flags: null }]);
  });

  test("a handler runs in its event's trace alone: not in the context of whoever started the bus, nor its baggage", async () => {
    // The worker's loops inherited the context bus.start() was called in (a boot span, a request's
    // tenant baggage), and every handler ran in it: the boot span was the parent of handlers whose
    // events had no W3C trace, and every handler read the baggage of the code that started the bus.
    const bus = await testBus(target, events);
    const seen = deferred<{ active: SpanContext | undefined; baggage: string | undefined }>();
    bus.on('order.created', 'ship', () => seen.resolve({
      active: trace.getSpanContext(context.active()),
      baggage: propagation.getBaggage(context.active())?.getEntry('tenant')?.value,
    }));
    const boot = propagation.setBaggage(context.active(), propagation.createBaggage({ tenant: { value: 'BOOT' } }));
    await context.with(boot, () => tracer.startActiveSpan('boot', async (span) => {
      await bus.start();
      span.end();
    }));
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'B' }, { traceId: 'order-42' }));
    const { active, baggage } = await seen.promise;
    expect(active).toBeUndefined();
    expect(baggage).toBeUndefined();
  });

  test('record() stores the active span only in the event\'s own trace, by every way it writes', async () => {
    const bus = await testBus(target, events);
    const other = 'cd'.repeat(16);
    const span = await tracer.startActiveSpan('import', async (s) => {
      const own = s.spanContext();
      // bus.transaction: on PostgreSQL the rows travel with COMMIT as literals; on PGlite they are inserted before it.
      await bus.transaction(async (tx) => {
        await bus.record(tx, 'order.created', { orderNo: '1' });
        await bus.recordMany(tx, [{ type: 'order.noted', payload: { note: '2' } }, { type: 'order.noted', payload: { note: '3' } }]);
        await bus.record(tx, 'order.noted', { note: 'upper' }, { traceId: own.traceId.toUpperCase() });
        await bus.record(tx, 'order.noted', { note: 'other' }, { traceId: other });
        await bus.record(tx, 'order.noted', { note: 'mine' }, { traceId: 'order-42' });
      });
      // The caller's own transaction: one row, then several (a statement each).
      await inCallersTransaction(target, async (tx) => {
        await bus.record(tx, 'order.noted', { note: '4' });
        await bus.recordMany(tx, [{ type: 'order.noted', payload: { note: '5' } }, { type: 'order.noted', payload: { note: '6' } }]);
      });
      s.end();
      return own;
    });
    await bus.transaction((tx) => bus.record(tx, 'order.noted', { note: 'no span' }));
    const rows = await storedTraces(target, bus.schema);
    const stored = { trace_id: span.traceId, span_id: span.spanId, trace_flags: TraceFlags.SAMPLED };
    expect(rows.slice(0, 4)).toEqual(rows.slice(0, 4).map((r) => ({ type: r.type, ...stored })));
    expect(rows.slice(4, 6)).toEqual([
      { type: 'order.noted', trace_id: other, span_id: null, trace_flags: null },
      { type: 'order.noted', trace_id: 'order-42', span_id: null, trace_flags: null },
    ]);
    expect(rows.slice(6, 9)).toEqual(rows.slice(6, 9).map(() => ({ type: 'order.noted', ...stored })));
    expect(rows[9]).toMatchObject({ span_id: null, trace_flags: null, trace_id: expect.stringMatching(/^[0-9a-f]{32}$/) });
    expect(rows).toHaveLength(10);

    async function inCallersTransaction(t: Target, fn: (tx: unknown) => Promise<void>): Promise<void> {
      if (t.name === 'pglite') {
        const db = (t.database() as { pglite: { transaction: (fn: (tx: unknown) => Promise<void>) => Promise<void> } }).pglite;
        await db.transaction(fn);
        return;
      }
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      try {
        await client.query('BEGIN');
        await fn(client);
        await client.query('COMMIT');
      } finally {
        await client.end();
      }
    }
  });

  test('in a handler, an event stores the user\'s span there, else the handler\'s parent, never a parent rea made up', async () => {
    const bus = await testBus(target, events);
    const done = deferred();
    let mine: SpanContext | undefined;
    bus.on('order.created', 'ship', async (e) => {
      await bus.transaction((tx) => bus.record(tx, 'order.noted', { note: `${e.payload.orderNo} plain` }));
      mine = await tracer.startActiveSpan('ship', async (span) => {
        await bus.transaction((tx) => bus.record(tx, 'order.noted', { note: `${e.payload.orderNo} in span` }));
        span.end();
        return span.spanContext();
      });
      if (e.payload.orderNo === 'given') done.resolve();
    });
    await bus.start();
    const { span } = await recordInSpan(bus);
    await bus.lifecycle.waitFor('job:completed');
    const firstMine = mine!;
    // A trace id given without a span: the handler's parent is made up, and what it records stores no span.
    const given = 'ef'.repeat(16);
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'given' }, { traceId: given }));
    await done.promise;
    const rows = (await target.query<StoredTrace & { note: string | null }>(
      `select type, trace_id, span_id, trace_flags, payload->>'note' as note from "${bus.schema}".events where type = 'order.noted' order by id`,
    )).map(({ type: _type, ...r }) => r);
    expect(rows).toEqual([
      { note: 'A plain', trace_id: span.traceId, span_id: span.spanId, trace_flags: TraceFlags.SAMPLED },
      { note: 'A in span', trace_id: span.traceId, span_id: firstMine.spanId, trace_flags: TraceFlags.SAMPLED },
      { note: 'given plain', trace_id: given, span_id: null, trace_flags: null },
      { note: 'given in span', trace_id: given, span_id: mine!.spanId, trace_flags: TraceFlags.SAMPLED },
    ]);
    expect(mine!.traceId).toBe(given);
  });

  test('with OpenTelemetry\'s pino instrumentation, a handler\'s log line carries one trace_id: its span\'s, beside that span\'s id', async () => {
    // Each line carried rea's trace_id as a binding, and the instrumentation's mixin wrote the
    // active span's beside it: two trace_id keys, different ones for an id that is no W3C one.
    const written: string[] = [];
    const bus = await testBus(target, events, { logger: instrumentPino(pinoLines(written)) });
    const done = deferred();
    const own: Record<string, SpanContext> = {};
    bus.on('order.created', 'ship', (e, ctx) => {
      if (e.payload.orderNo === 'F' && ctx.attempt === 1) throw new Error('down once');
      ctx.log.info({ step: `${e.payload.orderNo} plain` }, 'shipping');
      tracer.startActiveSpan('ship', (span) => {
        ctx.log.child({ carrier: 'post' }).info({ step: `${e.payload.orderNo} in span` }, 'shipping');
        own[e.payload.orderNo] = span.spanContext();
        span.end();
      });
      if (e.payload.orderNo === 'F') done.resolve();
    }, { backoff: quickBackoff });
    // Started inside a span of the application's: a line rea writes about a job outside its
    // handler (the failure below) must not take that span's ids.
    const boot = await tracer.startActiveSpan('boot', async (span) => {
      await bus.start();
      span.end();
      return span.spanContext();
    });
    const { span: recording } = await recordInSpan(bus);
    await bus.transaction(async (tx) => {
      await bus.record(tx, 'order.created', { orderNo: 'N' }, { traceId: 'order-42' });
      await bus.record(tx, 'order.created', { orderNo: 'F' }, { traceId: 'order-43' });
    });
    await done.promise;
    const lines = written.map((text) => ({ text, line: JSON.parse(text) as Record<string, unknown> }));
    for (const { text } of lines) expect(keysOf(text).filter((k) => k === 'trace_id'), text).toHaveLength(1);
    const at = (step: string) => lines.find(({ line }) => line.step === step)!.line;
    const ids = (span: SpanContext) => ({ trace_id: span.traceId, span_id: span.spanId, trace_flags: '01' });
    // A W3C trace: the handler's parent (the span that recorded the event), else the handler's own span.
    expect(at('A plain')).toMatchObject({ ...ids(recording), handler: 'ship', attempt: 1, msg: 'shipping' });
    expect(at('A in span')).toMatchObject({ ...ids(own.A!), carrier: 'post', handler: 'ship' });
    expect(own.A!.traceId).toBe(recording.traceId);
    for (const step of ['A plain', 'A in span']) expect(at(step)).not.toHaveProperty('rea_trace_id');
    // rea's own id, no OpenTelemetry trace: alone, with no span; in a span of the handler's (a trace
    // of its own), that span's ids, and rea's id beside them.
    expect(at('N plain')).toMatchObject({ trace_id: 'order-42' });
    expect(at('N plain')).not.toHaveProperty('span_id');
    expect(at('N in span')).toMatchObject({ ...ids(own.N!), rea_trace_id: 'order-42' });
    // The failure, logged by the worker after the handler: the job's trace, not the span bus.start() ran in.
    const failed = lines.find(({ line }) => line.msg === 'job failed; will retry')!.line;
    expect(failed).toMatchObject({ trace_id: 'order-43', handler: 'ship', attempt: 1 });
    expect(failed).not.toHaveProperty('span_id');
    expect(JSON.stringify(failed)).not.toContain(boot.spanId);
  });
});
