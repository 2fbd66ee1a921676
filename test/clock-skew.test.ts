// A worker whose host clock is off: retries are dated by the database's clock, which the claim
// compares scheduled_at with. The skew is simulated in this process (Date, as the host's clock
// sees it) while PostgreSQL keeps its own, as on a worker host whose NTP drifted.
import { expect, it, onTestFinished, vi } from 'vitest';
import { z } from 'zod';
import { defineEvents, retryAfter } from '../src/index.js';
import { postgresTarget, testBus } from './helpers/db.js';
import { deferred } from './helpers/signals.js';

const events = defineEvents({ 'order.created': z.object({ orderNo: z.string() }) });
const test = it.runIf(postgresTarget.available);

/** From now until the test ends, this process's clock (Date.now, new Date()) is `skewMs` off. */
function skewHostClock(skewMs: number): void {
  const RealDate = Date;
  const realNow = RealDate.now.bind(RealDate);
  class SkewedDate extends RealDate {
    constructor(...args: unknown[]) {
      if (args.length === 0) super(realNow() + skewMs);
      else super(...(args as [string]));
    }
    static override now(): number {
      return realNow() + skewMs;
    }
  }
  vi.stubGlobal('Date', SkewedDate);
  onTestFinished(() => void vi.unstubAllGlobals());
}

/**
 * The job is retryable and due within `seconds` (and no earlier than 1 s before) by the database's
 * clock, and job:failed said when, as stored.
 */
async function expectDueWithin(schema: string, eventId: string, failed: { retryAt: Date | null }, seconds: number): Promise<void> {
  const row = await dueIn(schema, eventId);
  expect(row.state).toBe('retryable');
  expect(row.in_s).toBeGreaterThan(seconds - 1);
  expect(row.in_s).toBeLessThanOrEqual(seconds);
  expect(failed.retryAt!.getTime()).toBe(row.scheduled_at.getTime());
}

/** The job's next attempt, in seconds from now by the database's clock, with its state. */
async function dueIn(schema: string, eventId: string): Promise<{ state: string; attempt: number; in_s: number; scheduled_at: Date }> {
  const [row] = await postgresTarget.query(
    `select state, attempt, scheduled_at, extract(epoch from scheduled_at - now())::float8 as in_s from "${schema}".jobs where event_id = $1`,
    [eventId],
  );
  return row;
}

test('a host 120 s ahead: a 1 s backoff is 1 s by the database\'s clock, and the next attempt comes then', async () => {
  skewHostClock(120_000);
  const bus = await testBus(postgresTarget, events);
  bus.on('order.created', 'flaky', (_e, ctx) => {
    if (ctx.attempt === 1) throw new Error('first attempt fails');
  }, { backoff: () => 1000 });
  await bus.start();
  const failed = bus.lifecycle.waitFor('job:failed');
  const completed = bus.lifecycle.waitFor('job:completed', undefined, 10_000);
  const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'A' }));
  // Before: due in 121 s (the host's now + 1 s, compared with the database's now()).
  await expectDueWithin(bus.schema, id, await failed, 1);
  expect(await completed).toMatchObject({ attempt: 2 });
}, 20_000);

test('a host 120 s behind: a 60 s backoff still waits 60 s (the next attempt ran at once)', async () => {
  skewHostClock(-120_000);
  const bus = await testBus(postgresTarget, events);
  bus.on('order.created', 'flaky', (_e, ctx) => {
    throw new Error(`attempt ${ctx.attempt} fails`);
  }, { backoff: () => 60_000 });
  await bus.start();
  const failed = bus.lifecycle.waitFor('job:failed');
  const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'B' }));
  // Before: due 60 s ago, so attempt 2 ran straight away.
  await expectDueWithin(bus.schema, id, await failed, 60);
}, 20_000);

test('retryAfter(ms) on a host 120 s ahead: due in ms by the database\'s clock', async () => {
  skewHostClock(120_000);
  const bus = await testBus(postgresTarget, events);
  bus.on('order.created', 'steered', () => {
    throw retryAfter(2000);
  });
  await bus.start();
  const failed = bus.lifecycle.waitFor('job:failed');
  const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'C' }));
  // Before: due in 122 s.
  await expectDueWithin(bus.schema, id, await failed, 2);
}, 20_000);

test('a stop on a host 120 s ahead: the aborted job is due at once elsewhere, not in 2 minutes', async () => {
  skewHostClock(120_000);
  const bus = await testBus(postgresTarget, events);
  const started = deferred();
  bus.on('order.created', 'stuck', () => {
    started.resolve();
    return new Promise(() => {});
  }, { timeoutMs: 60_000 });
  await bus.start();
  const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'D' }));
  await started.promise;
  await bus.stop({ timeoutMs: 100 });
  const row = await dueIn(bus.schema, id);
  expect(row).toMatchObject({ state: 'retryable', attempt: 0 });
  // Before: 120 s ahead, so "retried at once elsewhere" waited out the skew.
  expect(row.in_s).toBeLessThanOrEqual(0);
}, 20_000);

test('an inline round\'s failed delivery on a host 120 s ahead: its row is due after the backoff by the database\'s clock', async () => {
  skewHostClock(120_000);
  const bus = await testBus(postgresTarget, events, { relay: { inlineMs: 500 } });
  bus.on('order.created', 'flaky', () => {
    throw new Error('fails inside the round');
  }, { backoff: () => 1000 });
  await bus.start();
  const failed = bus.lifecycle.waitFor('job:failed');
  const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'E' }));
  // Before: due in 121 s.
  await expectDueWithin(bus.schema, id, await failed, 1);
}, 20_000);
