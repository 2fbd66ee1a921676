// A worker whose host clock is off: retries are dated by the database's clock, which the claim
// compares scheduled_at with, and so are the error entries and the log's retry_at. The skew is
// simulated in this process (Date, as the host's clock sees it) while PostgreSQL keeps its own, as
// on a worker host whose NTP drifted.
import { expect, it, onTestFinished, vi } from 'vitest';
import { z } from 'zod';
import { defineEvents, permanent, retryAfter } from '../src/index.js';
import { postgresTarget, testBus } from './helpers/db.js';
import { captureLogger } from './helpers/log.js';
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

test('an inline round\'s failed delivery on a host 120 s ahead: its row is due after the backoff by the database\'s clock, its error dated by it', async () => {
  skewHostClock(120_000);
  const lines: Record<string, unknown>[] = [];
  const bus = await testBus(postgresTarget, events, { relay: { inlineMs: 500 }, logger: captureLogger(lines) });
  let failedBy: Date | undefined;
  bus.on('order.created', 'flaky', async () => {
    failedBy = await databaseNow();
    throw new Error('fails inside the round');
  }, { backoff: () => 1000 });
  await bus.start();
  const failed = bus.lifecycle.waitFor('job:failed');
  const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'E' }));
  // Before: due in 121 s.
  const f = await failed;
  await expectDueWithin(bus.schema, id, f, 1);
  const [row] = await postgresTarget.query(`select errors from "${bus.schema}".jobs where event_id = $1`, [id]);
  expectDatedBy(row.errors[0].at, failedBy!);
  expect(lines.find((l) => l.msg === 'job failed; will retry')).toMatchObject({ retry_at: f.retryAt!.toISOString() });
}, 20_000);

/** The database's clock now. */
async function databaseNow(): Promise<Date> {
  const [row] = await postgresTarget.query<{ now: Date }>('select clock_timestamp() as now');
  return row!.now;
}

/** An error entry's `at` is the database's time of the failure: just after `failedBy` (read by the handler before it threw). */
function expectDatedBy(at: string, failedBy: Date): void {
  const ms = new Date(at).getTime() - failedBy.getTime();
  expect(ms).toBeGreaterThanOrEqual(-1); // `at` keeps microseconds, failedBy milliseconds
  expect(ms).toBeLessThan(500);
}

test('a host 120 s ahead: an error entry\'s at is the database\'s time of the failure (not of its late write), and the log\'s retry_at is the due time as stored', async () => {
  skewHostClock(120_000);
  const lines: Record<string, unknown>[] = [];
  // Failures are written 1.5 s after they come (their batch's window): the entry is dated when the run failed.
  const bus = await testBus(postgresTarget, events, { logger: captureLogger(lines), worker: { completionFlushMs: 1500 } });
  const failedBy = new Map<string, Date>();
  bus.on('order.created', 'flaky', async () => {
    failedBy.set('flaky', await databaseNow());
    throw new Error('fails');
  }, { backoff: () => 60_000 });
  bus.on('order.created', 'doomed', async () => {
    failedBy.set('doomed', await databaseNow());
    throw permanent(new Error('never works'));
  });
  await bus.start();
  const failed = bus.lifecycle.waitFor('job:failed');
  const discarded = bus.lifecycle.waitFor('job:discarded');
  const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'F' }));
  const [f] = await Promise.all([failed, discarded]);
  const rows = Object.fromEntries((await postgresTarget.query(`select target, errors, scheduled_at from "${bus.schema}".jobs where event_id = $1`, [id]))
    .map((r) => [r.target, r]));
  // Before: 120 s ahead of the database's time (the host's), or 1.5 s after the failure (the write's).
  expectDatedBy(rows.flaky.errors[0].at, failedBy.get('flaky')!);
  expectDatedBy(rows.doomed.errors[0].at, failedBy.get('doomed')!);
  // The retry is due the backoff after the failure, both by the database's clock.
  expect(Math.abs(rows.flaky.scheduled_at.getTime() - new Date(rows.flaky.errors[0].at).getTime() - 60_000)).toBeLessThan(50);
  // Before: the host's now + 60 s, two minutes after the time stored.
  expect(f.retryAt!.getTime()).toBe(rows.flaky.scheduled_at.getTime());
  expect(lines.find((l) => l.msg === 'job failed; will retry' && l.handler === 'flaky')).toMatchObject({ retry_at: rows.flaky.scheduled_at.toISOString() });
  expect(lines.find((l) => l.msg === 'job discarded' && l.handler === 'doomed')).toMatchObject({ retry_at: null });
}, 20_000);
