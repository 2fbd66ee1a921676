// rea/testing: assertions on what a transaction recorded, and running one handler directly.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineEvents, HandlerTimeoutError, OptionsError, PayloadValidationError, UnsupportedTransactionError, WorkerStoppingError } from '../src/index.js';
import { expectRecorded, HandlerTimeoutError as TestingHandlerTimeoutError, recordedIn, runHandlerNow } from '../src/testing/index.js';
import { runDemo } from '../src/cli/demo.js';
import { describeTargets, testBus } from './helpers/db.js';

const events = defineEvents({
  'order.created': z.object({ orderNo: z.string(), total: z.number() }),
  'order.paid': z.object({ orderNo: z.string() }),
  'order.shipped': z.object({ orderNo: z.string().transform((s) => s.toUpperCase()), carrier: z.string().default('post') }),
});

describeTargets('rea/testing on $name', (target) => {
  it.skipIf(!target.available)('expectRecorded sees only this transaction’s uncommitted events', async () => {
    const bus = await testBus(target, events);
    await bus.transaction((tx) => bus.record(tx, 'order.paid', { orderNo: 'OLD' }));
    await bus.transaction(async (tx) => {
      await bus.record(tx, 'order.created', { orderNo: 'N1', total: 5 }, { subject: 'N1' });
      const rows = await recordedIn(bus, tx);
      expect(rows.map((r) => r.type)).toEqual(['order.created']);
      const e = await expectRecorded(bus, tx, 'order.created', { orderNo: 'N1' });
      expect(e.subject).toBe('N1');
      await expect(expectRecorded(bus, tx, 'order.paid')).rejects.toThrow(/expected this transaction to record 'order.paid'/);
      await expect(expectRecorded(bus, tx, 'order.created', { total: 6 })).rejects.toThrow(/"total":5/);
    });
  });

  it.skipIf(!target.available)('expectRecorded sees the events recorded inside a savepoint (an ORM\'s nested transaction), and not those of one rolled back', async () => {
    const bus = await testBus(target, events);
    await bus.transaction(async (tx) => {
      await bus.record(tx, 'order.created', { orderNo: 'TOP', total: 1 });
      await tx.query('savepoint nested');
      await bus.record(tx, 'order.paid', { orderNo: 'IN-SAVEPOINT' });
      await tx.query('savepoint deeper');
      await bus.record(tx, 'order.paid', { orderNo: 'DEEPER' });
      await tx.query('release savepoint deeper');
      await tx.query('savepoint undone');
      await bus.record(tx, 'order.paid', { orderNo: 'ROLLED-BACK' });
      await tx.query('rollback to savepoint undone');
      // Committed by another transaction after this one began: visible to it (read committed), yet
      // not its own. (PGlite runs one transaction at a time: the other would wait for this one.)
      if (target.name === 'postgres') await bus.transaction((other) => bus.record(other, 'order.paid', { orderNo: 'OTHER' }));
      // Before, only TOP was listed: a row written in a savepoint carries the savepoint's own
      // transaction id, and expectRecorded said the transaction recorded no 'order.paid'.
      const rows = await recordedIn(bus, tx);
      expect(rows.map((r) => (r.payload as { orderNo: string }).orderNo)).toEqual(['TOP', 'IN-SAVEPOINT', 'DEEPER']);
      await expectRecorded(bus, tx, 'order.paid', { orderNo: 'IN-SAVEPOINT' });
      await expect(expectRecorded(bus, tx, 'order.paid', { orderNo: 'OTHER' })).rejects.toThrow(/expected this transaction to record/);
    });
  });

  it.skipIf(!target.available)('recordedIn and expectRecorded, given no open transaction, say so in their own name', async () => {
    const bus = await testBus(target, events);
    let ended: unknown;
    await bus.transaction(async (tx) => {
      ended = tx;
    });
    // Before, both said 'record() was given…', a function the test never called.
    for (const [caller, call] of [
      ['recordedIn()', (tx: unknown) => recordedIn(bus, tx)],
      ['expectRecorded()', (tx: unknown) => expectRecorded(bus, tx, 'order.created')],
    ] as const) {
      const notTx = await call({}).catch((e: unknown) => e);
      expect(notTx).toBeInstanceOf(UnsupportedTransactionError);
      expect((notTx as Error).message).toContain(`${caller} needs a transaction: `);
      const late = await call(ended).catch((e: unknown) => e);
      expect(late).toBeInstanceOf(UnsupportedTransactionError);
      expect((late as Error).message).toBe(`${caller} was given a rea transaction that has already ended`);
    }
  });

  it.skipIf(!target.available)('runHandlerNow calls a registered handler with a full context', async () => {
    const bus = await testBus(target, events);
    const seen: string[] = [];
    bus.on('order.created', 'h', (e, ctx) => {
      seen.push(`${e.payload.orderNo}:${ctx.attempt}:${ctx.idempotencyKey}`);
    });
    await runHandlerNow(bus, 'h', { id: 'e1', type: 'order.created', payload: { orderNo: 'X', total: 1 } }, { attempt: 2 });
    expect(seen).toEqual(['X:2:e1:h']);
    await expect(runHandlerNow(bus, 'nope', { type: 'order.created', payload: { orderNo: 'X', total: 1 } })).rejects.toThrow(/no handler named 'nope'/);
    // A misuse is a typed error naming what is wrong, as rea's own are (it was a plain Error).
    await expect(runHandlerNow(bus, 'nope', { type: 'order.created', payload: { orderNo: 'X', total: 1 } })).rejects.toMatchObject({ name: 'OptionsError', field: 'runHandlerNow(name)' });
  });

  it.skipIf(!target.available)("runHandlerNow's ctx.jobId is digits, as a worker's, new at each call, and names no job the sequence hands out", async () => {
    // Every call had ctx.jobId 'test': a handler storing it in a bigint column, or parsing it, failed only in its tests.
    const bus = await testBus(target, events);
    const ids: string[] = [];
    bus.on('order.created', 'h', (_e, ctx) => void ids.push(ctx.jobId));
    for (const orderNo of ['A', 'B']) await runHandlerNow(bus, 'h', { type: 'order.created', payload: { orderNo, total: 1 } });
    expect(ids).toHaveLength(2);
    for (const id of ids) {
      expect(id).toMatch(/^\d+$/);
      expect(BigInt(id)).toBeGreaterThan(2n ** 62n);
      expect(BigInt(id)).toBeLessThanOrEqual(2n ** 63n - 1n);
    }
    expect(ids[0]).not.toBe(ids[1]);
  });

  it.skipIf(!target.available)('runHandlerNow given no event id makes one for each call, so each runs in a trace of its own', async () => {
    const bus = await testBus(target, events);
    const runs: { id: string; traceId: string | null; key: string }[] = [];
    bus.on('order.created', 'h', async (e, ctx) => {
      runs.push({ id: e.id, traceId: e.traceId, key: ctx.idempotencyKey });
      await bus.transaction((tx) => bus.record(tx, 'order.paid', { orderNo: e.payload.orderNo }, { subject: e.payload.orderNo }));
    });
    await runHandlerNow(bus, 'h', { type: 'order.created', payload: { orderNo: 'A', total: 1 } });
    await runHandlerNow(bus, 'h', { type: 'order.created', payload: { orderNo: 'B', total: 1 } });
    const [a, b] = runs;
    // Before, both had the id 00000000-0000-7000-8000-000000000000 and its trace id.
    expect(a!.id).not.toBe(b!.id);
    expect(a!.traceId).not.toBe(b!.traceId);
    expect(a!.key).not.toBe(b!.key);
    for (const run of runs) {
      expect(run.traceId).toBe(run.id.replace(/-/g, ''));
      expect(run.key).toBe(`${run.id}:h`);
    }
    // The events each run recorded are in its trace alone.
    for (const [run, orderNo] of [[a!, 'A'], [b!, 'B']] as const) {
      expect((await bus.events.list({ traceId: run.traceId! })).items.map((r) => r.subject)).toEqual([orderNo]);
    }
  });

  it.skipIf(!target.available)('runHandlerNow gives ctx.tx only to a transactional handler, as a worker does', async () => {
    const bus = await testBus(target, events);
    const saw: string[] = [];
    bus.on('order.created', 'plain', async (_e, ctx) => {
      saw.push(ctx.tx ? 'plain:tx' : 'plain:none');
    });
    bus.on('order.created', 'in-tx', async (_e, ctx) => {
      saw.push(ctx.tx ? 'in-tx:tx' : 'in-tx:none');
    }, { transactional: true });
    const event = { type: 'order.created' as const, payload: { orderNo: 'X', total: 1 } };
    // Before, the plain handler got the tx it is never given in production, and this resolved with 'plain:tx'.
    await bus.transaction(async (tx) => {
      await expect(runHandlerNow(bus, 'plain', event, { tx })).rejects.toThrow(/handler 'plain' is not transactional: a worker runs it with no ctx.tx/);
      await expect(runHandlerNow(bus, 'plain', event, { tx })).rejects.toBeInstanceOf(OptionsError);
      await runHandlerNow(bus, 'in-tx', event, { tx });
    });
    await runHandlerNow(bus, 'plain', event);
    await expect(runHandlerNow(bus, 'in-tx', event)).rejects.toMatchObject({ name: 'OptionsError', field: 'runHandlerNow(options).tx' });
    expect(saw).toEqual(['in-tx:tx', 'plain:none']);
  });

  it.skipIf(!target.available)('runHandlerNow runs a handler as a worker would: trace, payload as stored, subscription, timeout', async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = {
      debug() {}, info() {}, warn() {}, error() {},
      child(bindings: Record<string, unknown>) {
        return { ...logger, info: (obj: object, msg?: string) => lines.push({ ...bindings, ...obj, msg }) };
      },
    };
    const bus = await testBus(target, events, { logger });
    const received: unknown[] = [];
    bus.on('order.shipped', 'notify', async (e, ctx) => {
      received.push(e.payload);
      ctx.log.info({ step: 'sent' }, 'notified');
      await bus.transaction((tx) => bus.record(tx, 'order.paid', { orderNo: e.payload.orderNo }));
    });
    const trace = 'cd'.repeat(16);
    await runHandlerNow(bus, 'notify', { id: 'e1', type: 'order.shipped', payload: { orderNo: 'a1' }, traceId: trace });
    // The schema's transform and default, as record() stores the payload and the worker reads it.
    expect(received).toEqual([{ orderNo: 'A1', carrier: 'post' }]);
    // Events it records inherit the event's trace, as in production; ctx.log goes to the bus's logger with it.
    const recorded = (await bus.events.list({ type: 'order.paid' })).items;
    expect(recorded.map((r) => r.traceId)).toEqual([trace]);
    expect(lines).toEqual([expect.objectContaining({ trace_id: trace, event_id: 'e1', handler: 'notify', attempt: 1, step: 'sent', msg: 'notified' })]);

    // Given no trace id, the handler's event carries the one its log lines and its events get (a
    // worker's event always has one: record() stores it); it was null. One in upper case is lower-cased, as record() does.
    const traces: (string | null)[] = [];
    bus.on('order.paid', 'trace-reader', async (e) => {
      traces.push(e.traceId);
      await bus.transaction((tx) => bus.record(tx, 'order.paid', { orderNo: 'child' }));
    });
    const eventId = '01a24bae-51d5-7000-b773-421bb78a3e1d';
    await runHandlerNow(bus, 'trace-reader', { id: eventId, type: 'order.paid', payload: { orderNo: 'T' } });
    await runHandlerNow(bus, 'trace-reader', { type: 'order.paid', payload: { orderNo: 'T' }, traceId: 'AB'.repeat(16) });
    expect(traces).toEqual([eventId.replace(/-/g, ''), 'ab'.repeat(16)]);
    for (const t of traces) expect((await bus.events.list({ traceId: t! })).items.map((r) => r.type)).toEqual(['order.paid']);

    // What record() refuses, or what the relay never routes to it, no worker would ever run.
    // The event is typed as record() takes it, so this one does not compile; a caller that casts gets record()'s error.
    // @ts-expect-error orderNo is a string in the schema
    await expect(runHandlerNow(bus, 'notify', { type: 'order.shipped', payload: { orderNo: 5 } })).rejects.toThrow(PayloadValidationError);
    await expect(runHandlerNow(bus, 'notify', { type: 'order.paid', payload: { orderNo: 'X' } })).rejects.toThrow(/does not subscribe to 'order.paid'/);
    await expect(runHandlerNow(bus, 'notify', { type: 'order.paid', payload: { orderNo: 'X' } })).rejects.toMatchObject({ name: 'OptionsError', field: 'runHandlerNow(event).type' });

    // A handler that never settles is aborted at its timeout, through ctx.signal.
    let signal: AbortSignal | undefined;
    bus.on('order.paid', 'hangs', (_e, ctx) => {
      signal = ctx.signal;
      return new Promise(() => {});
    }, { timeoutMs: 50 });
    const err = await runHandlerNow(bus, 'hangs', { type: 'order.paid', payload: { orderNo: 'H' } }).catch((e: unknown) => e);
    expect(err).toMatchObject({ name: 'HandlerTimeoutError' });
    // Documented as rejecting with a HandlerTimeoutError, which neither 'rea' nor 'rea/testing' exported.
    expect(err).toBeInstanceOf(HandlerTimeoutError);
    expect(TestingHandlerTimeoutError).toBe(HandlerTimeoutError);
    expect(signal!.aborted).toBe(true);
    expect(signal!.reason).toBeInstanceOf(HandlerTimeoutError);
    expect(new WorkerStoppingError()).toBeInstanceOf(Error);
  });
});

describe('demo', () => {
  it('runs the order service on PGlite and reports every job finished', async () => {
    const summary = await runDemo({ orders: 20, ratePerSecond: 200, quiet: true });
    expect(summary.recorded).toBe(40);
    expect(summary.fanned).toBe(40);
    // 20 × warehouse + 20 × sms (1 discarded: order 13) + 20 webhooks + search-index (coalesced per order and round).
    expect(summary.discarded).toBe(1);
    expect(summary.smsSent).toBe(19);
    expect(summary.completed).toBeGreaterThanOrEqual(20 + 19 + 20 + 20);
    expect(summary.retried).toBeGreaterThanOrEqual(2 + 2); // orders 7 and 14 once, order 13 twice
    expect(summary.latencyP99Ms).toBeGreaterThan(0);
    // One signed delivery per paid order, each verified by the receiver.
    expect(summary.webhooksVerified).toBe(20);
    expect(summary.webhooksRejected).toBe(0);
  }, 60_000);
});
