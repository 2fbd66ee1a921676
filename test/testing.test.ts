// rea/testing: assertions on what a transaction recorded, and running one handler directly.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineEvents } from '../src/index.js';
import { expectRecorded, recordedIn, runHandlerNow } from '../src/testing/index.js';
import { runDemo } from '../src/cli/demo.js';
import { describeTargets, testBus } from './helpers/db.js';

const events = defineEvents({
  'order.created': z.object({ orderNo: z.string(), total: z.number() }),
  'order.paid': z.object({ orderNo: z.string() }),
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

  it.skipIf(!target.available)('runHandlerNow calls a registered handler with a full context', async () => {
    const bus = await testBus(target, events);
    const seen: string[] = [];
    bus.on('order.created', 'h', (e, ctx) => {
      seen.push(`${e.payload.orderNo}:${ctx.attempt}:${ctx.idempotencyKey}`);
    });
    await runHandlerNow(bus, 'h', { id: 'e1', type: 'order.created', payload: { orderNo: 'X', total: 1 } }, { attempt: 2 });
    expect(seen).toEqual(['X:2:e1:h']);
    await expect(runHandlerNow(bus, 'nope', { type: 'order.created', payload: {} })).rejects.toThrow(/no handler named 'nope'/);
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
