// Handlers: routing, retries, discards, timeouts, permanent/retryAfter, transactional exactly-once,
// trace propagation, leases across processes and stop().
import { expect, it, onTestFinished } from 'vitest';
import { z } from 'zod';
import { createBus, defineEvents, permanent, retryAfter, type HandlerContext } from '../src/index.js';
import { describeTargets, freshSchema, PG_URL, quickBackoff, testBus } from './helpers/db.js';
import { captureLogger } from './helpers/log.js';
import { deferred } from './helpers/signals.js';
import { currentTraceId } from '../src/core/trace.js';

const events = defineEvents({
  'order.created': z.object({ orderNo: z.string() }),
  'order.paid': z.object({ orderNo: z.string(), amount: z.number() }),
  'user.signed_up': z.object({ email: z.string() }),
  'audit.logged': z.object({ note: z.string() }),
});

describeTargets('delivery on $name', (target) => {
  const test = it.skipIf(!target.available);

  test('patterns route by prefix and * matches everything; payload types follow the pattern', async () => {
    const bus = await testBus(target, events);
    const got: Record<string, string[]> = { orders: [], all: [] };
    bus.on('order.*', 'orders', (e) => {
      // Compile-time check: only order events reach here, so the payload has orderNo.
      got.orders!.push(`${e.type}:${e.payload.orderNo}`);
    });
    bus.on('*', 'all', (e) => {
      got.all!.push(e.type);
    });
    await bus.start();
    const allDone = new Promise<void>((resolve) => {
      let n = 0;
      bus.lifecycle.on('job:completed', () => ++n === 5 && resolve());
    });
    await bus.transaction(async (tx) => {
      await bus.record(tx, 'order.created', { orderNo: 'A' }, { subject: 'A' });
      await bus.record(tx, 'order.paid', { orderNo: 'A', amount: 3 }, { subject: 'A' });
      await bus.record(tx, 'user.signed_up', { email: 'a@example.com' });
    });
    await allDone;
    expect(got.orders!.sort()).toEqual(['order.created:A', 'order.paid:A']);
    expect(got.all!.sort()).toEqual(['order.created', 'order.paid', 'user.signed_up']);
  });

  test('a failing handler is retried and then succeeds; attempts and errors are recorded', async () => {
    const bus = await testBus(target, events);
    const attempts: number[] = [];
    bus.on('order.created', 'flaky', (_e, ctx) => {
      attempts.push(ctx.attempt);
      if (ctx.attempt < 3) throw new Error(`provider down (try ${ctx.attempt})`);
    }, { backoff: quickBackoff });
    await bus.start();
    const done = bus.lifecycle.waitFor('job:completed');
    const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'F' }));
    const completed = await done;
    expect(completed.attempt).toBe(3);
    expect(attempts).toEqual([1, 2, 3]);
    const [job] = await bus.jobs.forEvent(id);
    expect(job!.state).toBe('completed');
    expect(job!.errors.map((e) => [e.attempt, e.message])).toEqual([[1, 'provider down (try 1)'], [2, 'provider down (try 2)']]);
    expect(job!.errors[0]!.stack).toContain('provider down');
  });

  test('default backoff is 5 s × 5^(n-1) plus up to 30 s of jitter, counted from the failure', async () => {
    const bus = await testBus(target, events);
    bus.on('order.created', 'slow-retry', () => {
      throw new Error('nope');
    });
    await bus.start();
    const failed = bus.lifecycle.waitFor('job:failed');
    const before = Date.now();
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'B' }));
    const f = await failed;
    const delay = f.retryAt!.getTime() - before;
    expect(delay).toBeGreaterThanOrEqual(5000);
    expect(delay).toBeLessThan(5000 + 30_000 + 2000);
  });

  test('after maxAttempts the job is discarded with its whole error history; non-Error throws are caught', async () => {
    const bus = await testBus(target, events);
    const thrown: unknown[] = ['a plain string', { code: 42 }, undefined];
    bus.on('order.created', 'hopeless', (_e, ctx) => {
      throw thrown[ctx.attempt - 1];
    }, { maxAttempts: 3, backoff: quickBackoff });
    await bus.start();
    const discarded = bus.lifecycle.waitFor('job:discarded');
    const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'D' }));
    expect((await discarded).attempt).toBe(3);
    const [job] = await bus.jobs.forEvent(id);
    expect(job!.state).toBe('discarded');
    expect(job!.finalizedAt).toBeInstanceOf(Date);
    expect(job!.errors.map((e) => e.message)).toEqual(['a plain string', 'non-Error thrown: {"code":42}', 'undefined']);
  });

  test('a thrown value that cannot be printed (no prototype, a BigInt; a non-string message) still fails the attempt at once', async () => {
    const bus = await testBus(target, events);
    const unprintable = Object.assign(Object.create(null), { amount: 10n }); // JSON.stringify and String() both throw
    const odd = new Error('x');
    (odd as unknown as { message: unknown }).message = 42;
    const thrown: unknown[] = [unprintable, odd];
    bus.on('order.created', 'odd-throws', (_e, ctx) => {
      throw thrown[ctx.attempt - 1];
    }, { maxAttempts: 2, backoff: quickBackoff, timeoutMs: 60_000 });
    await bus.start();
    const discarded = bus.lifecycle.waitFor('job:discarded');
    const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'U' }));
    expect((await discarded).attempt).toBe(2);
    const [job] = await bus.jobs.forEvent(id);
    expect(job!.errors.map((e) => [e.attempt, e.name, e.message])).toEqual([
      [1, 'object', 'non-Error thrown: a value that cannot be printed'],
      [2, 'Error', '42'],
    ]);
  });

  test('a hanging handler is aborted at its timeout through ctx.signal', async () => {
    const bus = await testBus(target, events);
    let signal: AbortSignal | undefined;
    bus.on('order.created', 'hangs', (_e, ctx) => {
      signal = ctx.signal;
      return new Promise(() => {}); // never settles, ignores the signal
    }, { timeoutMs: 200, maxAttempts: 1 });
    await bus.start();
    const discarded = bus.lifecycle.waitFor('job:discarded');
    const started = Date.now();
    const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'H' }));
    const d = await discarded;
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
    expect(d.error).toBe('handler timed out after 200 ms and was aborted');
    expect(signal!.aborted).toBe(true);
    const [job] = await bus.jobs.forEvent(id);
    expect(job!.errors[0]!.name).toBe('HandlerTimeoutError');
  });

  test('a handler that never reads ctx.signal is still cut at its timeout; ctx.signal read late is already aborted', async () => {
    const bus = await testBus(target, events);
    let ctxOf: { signal: AbortSignal } | undefined;
    bus.on('order.created', 'ignores-signal', (_e, ctx) => {
      ctxOf = ctx; // keeps the context, never touches its signal while running
      return new Promise(() => {});
    }, { timeoutMs: 150, maxAttempts: 1 });
    await bus.start();
    const discarded = bus.lifecycle.waitFor('job:discarded');
    const started = Date.now();
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'S' }));
    const d = await discarded;
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
    expect(d.error).toBe('handler timed out after 150 ms and was aborted');
    const late = ctxOf!.signal;
    expect(late.aborted).toBe(true);
    expect((late.reason as Error).name).toBe('HandlerTimeoutError');
  });

  test('permanent() discards at once; retryAfter() sets the next attempt time', async () => {
    const bus = await testBus(target, events);
    bus.on('order.created', 'perm', () => {
      throw permanent(new Error('customer does not exist'));
    });
    bus.on('order.paid', 'later', () => {
      throw retryAfter(60_000, 'rate limited');
    });
    await bus.start();
    const discarded = bus.lifecycle.waitFor('job:discarded', (e) => e.handler === 'perm');
    const failed = bus.lifecycle.waitFor('job:failed', (e) => e.handler === 'later');
    const t0 = Date.now();
    await bus.transaction(async (tx) => {
      await bus.record(tx, 'order.created', { orderNo: 'P' });
      await bus.record(tx, 'order.paid', { orderNo: 'P', amount: 1 });
    });
    const d = await discarded;
    expect(d.attempt).toBe(1);
    expect(d.error).toBe('customer does not exist');
    const f = await failed;
    expect(f.retryAt!.getTime() - t0).toBeGreaterThanOrEqual(60_000);
    expect(f.retryAt!.getTime() - t0).toBeLessThan(62_000);
  });

  test('transactional: writes, consume record and completion commit together; a redelivery does not run it again', async () => {
    const bus = await testBus(target, events);
    const s = bus.schema;
    await target.query(`create table "${s}".paid_totals (order_no text primary key, total numeric not null)`);
    let calls = 0;
    bus.on('order.paid', 'ledger', async (e, ctx) => {
      calls++;
      await ctx.tx!.query(
        `insert into "${s}".paid_totals values ($1, $2) on conflict (order_no) do update set total = paid_totals.total + excluded.total`,
        [e.payload.orderNo, e.payload.amount],
      );
    }, { transactional: true });
    await bus.start();
    const done = bus.lifecycle.waitFor('job:completed');
    const id = await bus.transaction((tx) => bus.record(tx, 'order.paid', { orderNo: 'T1', amount: 10 }));
    await done;
    const consumes = await target.query(`select handler from "${s}".consumes where event_id = $1`, [id]);
    expect(consumes).toEqual([{ handler: 'ledger' }]);

    // Force a redelivery, as a rescue after a lost completion would.
    const skipped = bus.lifecycle.waitFor('job:skipped');
    await target.query(`update "${s}".jobs set state = 'available', scheduled_at = now() where event_id = $1`, [id]);
    bus.wake();
    await skipped;
    expect(calls).toBe(1);
    expect(await target.query(`select total::int as total from "${s}".paid_totals`)).toEqual([{ total: 10 }]);
    const [job] = await bus.jobs.forEvent(id);
    expect(job!.state).toBe('completed');
  });

  test('transactional: a failing handler rolls back its writes and its consume record', async () => {
    const bus = await testBus(target, events);
    const s = bus.schema;
    await target.query(`create table "${s}".side_effects (note text)`);
    bus.on('audit.logged', 'writer', async (e, ctx) => {
      await ctx.tx!.query(`insert into "${s}".side_effects values ($1)`, [`${e.payload.note}:${ctx.attempt}`]);
      if (ctx.attempt === 1) throw new Error('fail after writing');
    }, { transactional: true, backoff: quickBackoff });
    await bus.start();
    const done = bus.lifecycle.waitFor('job:completed');
    await bus.transaction((tx) => bus.record(tx, 'audit.logged', { note: 'n' }));
    expect((await done).attempt).toBe(2);
    expect(await target.query(`select note from "${s}".side_effects`)).toEqual([{ note: 'n:2' }]);
  });

  test('transactional: a handler that rolls back rea\'s transaction itself is not completed; the attempt fails, and the retry\'s write is kept', async () => {
    // After its ROLLBACK the completion ran outside any transaction and succeeded: the job said
    // completed while its write and its consume record were gone.
    const bus = await testBus(target, events);
    const s = bus.schema;
    await target.query(`create table "${s}".side_effects (note text)`);
    const refused: string[] = [];
    bus.on('audit.logged', 'self-rollback', async (e, ctx) => {
      await ctx.tx!.query(`insert into "${s}".side_effects values ($1)`, [`${e.payload.note}:${ctx.attempt}`]);
      // Through ctx.tx.query it is refused before it is sent; on the raw handle it goes.
      if (ctx.attempt === 1) await ctx.tx!.query('rollback').catch((err: Error) => void refused.push(err.name));
      if (ctx.attempt === 1) await (ctx.tx!.raw as { query(sql: string): Promise<unknown> }).query('rollback');
    }, { transactional: true, backoff: quickBackoff });
    await bus.start();
    const failed = bus.lifecycle.waitFor('job:failed');
    const done = bus.lifecycle.waitFor('job:completed');
    const id = await bus.transaction((tx) => bus.record(tx, 'audit.logged', { note: 'n' }));
    expect((await failed).error).toMatch(/^handler self-rollback rolled back its transaction \(ctx\.tx\)/);
    expect((await done).attempt).toBe(2);
    expect(await target.query(`select note from "${s}".side_effects`)).toEqual([{ note: 'n:2' }]);
    expect(await target.query(`select handler from "${s}".consumes where event_id = $1`, [id])).toEqual([{ handler: 'self-rollback' }]);
    const [job] = await bus.jobs.forEvent(id);
    expect(job).toMatchObject({ state: 'completed', attempt: 2 });
    expect(job!.errors.map((x) => x.name)).toEqual(['HandlerTransactionEndedError']);
    expect(refused).toEqual(['TransactionError']);
  });

  test('priority: a higher-priority job claimed together with lower ones starts first', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { concurrency: 2 } });
    const order: string[] = [];
    bus.on('order.created', 'low', (e) => { order.push(`low:${e.payload.orderNo}`); }, { priority: 10 });
    bus.on('order.paid', 'high', () => { order.push('high'); }, { priority: 0 });
    // Stored as start() stores them, so the round below makes the jobs before any worker runs.
    await bus.driver.executor.handlerUpsertMany([
      { name: 'low', patterns: ['order.created'], coalesceSubject: false, maxAttempts: 25, leaseMs: 35_000, priority: 10 },
      { name: 'high', patterns: ['order.paid'], coalesceSubject: false, maxAttempts: 25, leaseMs: 35_000, priority: 0 },
    ]);
    for (let n = 1; n <= 6; n++) await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: `${n}` }));
    await bus.transaction((tx) => bus.record(tx, 'order.paid', { orderNo: 'P', amount: 1 }));
    await bus.relayOnce();
    let completed = 0;
    const all = new Promise<void>((resolve) => bus.lifecycle.on('job:completed', () => ++completed === 7 && resolve()));
    await bus.start();
    await all;
    // One claim takes all seven: the worker starts them in the order the claim returns them.
    expect(order[0]).toBe('high');
    expect(order.slice(1)).toEqual(['low:1', 'low:2', 'low:3', 'low:4', 'low:5', 'low:6']);
  });

  // PGlite's one connection is held by the handler's transaction: the rescue cannot come from beside it there.
  it.skipIf(!target.available || target.name !== 'postgres')('transactional: a job rescued while its handler ran is not reported completed nor failed; its writes roll back and the next attempt makes them once', async () => {
    const lines: Record<string, unknown>[] = [];
    const bus = await testBus(target, events, { logger: captureLogger(lines) });
    const s = bus.schema;
    await target.query(`create table "${s}".side_effects (note text)`);
    const completed: number[] = [];
    const failed: number[] = [];
    bus.lifecycle.on('job:completed', (c) => completed.push(c.attempt));
    bus.lifecycle.on('job:failed', (f) => failed.push(f.attempt));
    bus.on('audit.logged', 'slow-writer', async (e, ctx) => {
      await ctx.tx!.query(`insert into "${s}".side_effects values ($1)`, [`${e.payload.note}:${ctx.attempt}`]);
      // What the rescuer does to a job whose lease expired, from another connection.
      if (ctx.attempt === 1) await target.query(`update "${s}".jobs set state = 'retryable', lease_expires_at = null where id = $1`, [ctx.jobId]);
    }, { transactional: true, backoff: quickBackoff });
    await bus.start();
    const done = bus.lifecycle.waitFor('job:completed');
    const id = await bus.transaction((tx) => bus.record(tx, 'audit.logged', { note: 'n' }));
    expect((await done).attempt).toBe(2);
    expect(completed).toEqual([2]);
    // The rescuer had the job back: attempt 1's failure is not the row's, so it is only logged.
    expect(failed).toEqual([]);
    // Logged once the failure's write found the job no longer this run's, which may come after attempt 2.
    await expect.poll(() => lines.some((l) => l.job_id !== undefined && /lease expired while it ran/.test(String(l.err)))).toBe(true);
    expect(await target.query(`select note from "${s}".side_effects`)).toEqual([{ note: 'n:2' }]);
    expect((await bus.jobs.forEvent(id))[0]).toMatchObject({ state: 'completed', attempt: 2 });
  });

  // On PostgreSQL a transactional handler waits for a pool connection (PGlite's one connection is
  // not a pool: there, rea's transactions queue inside PGlite itself).
  it.skipIf(!target.available || target.name !== 'postgres')('transactional: a job whose timeout passes while it waits for a connection never calls its handler', async () => {
    const bus = await testBus(target, events, { database: { postgres: PG_URL, poolSize: 2 }, relay: { enabled: false } });
    const called: boolean[] = [];
    for (const name of ['hog-1', 'hog-2']) {
      bus.on('order.created', name, async (_e, ctx) => {
        await ctx.tx!.query('select pg_sleep(1)');
      }, { transactional: true, maxAttempts: 1 });
    }
    bus.on('order.paid', 'victim', async (_e, ctx) => {
      called.push(ctx.signal.aborted);
    }, { transactional: true, maxAttempts: 1, timeoutMs: 200 });
    // Subscriptions are stored at start; the relay runs only when asked. One round makes the hogs'
    // jobs and then the victim's: they start in that order, the hogs take both connections for a
    // second, and the victim's job waits for one past its timeout.
    await bus.start();
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'W' }));
    const id = await bus.transaction((tx) => bus.record(tx, 'order.paid', { orderNo: 'W', amount: 1 }));
    const discarded = bus.lifecycle.waitFor('job:discarded', (d) => d.handler === 'victim');
    await bus.relayOnce();
    expect((await discarded).error).toBe('handler timed out after 200 ms and was aborted');
    expect(called).toEqual([]);
    expect((await bus.jobs.forEvent(id)).map((j) => j.state)).toEqual(['discarded']);
  });

  test('transactional: a write a handler makes after its timeout fails and never commits, through ctx.tx or its raw handle', async () => {
    const bus = await testBus(target, events);
    const s = bus.schema;
    await target.query(`create table "${s}".side_effects (note text)`);
    const late = deferred<unknown[]>();
    bus.on('audit.logged', 'late-writer', async (_e, ctx) => {
      await ctx.tx!.query(`insert into "${s}".side_effects values ('before')`);
      await new Promise((r) => setTimeout(r, 400)); // past the timeout, ignoring ctx.signal
      const raw = ctx.tx!.raw as { query(sql: string): Promise<unknown> };
      late.resolve(await Promise.all([
        ctx.tx!.query(`insert into "${s}".side_effects values ('late tx')`).then(() => 'written', (e: Error) => e.message),
        raw.query(`insert into "${s}".side_effects values ('late raw')`).then(() => 'written', (e: Error) => e.message),
      ]));
    }, { transactional: true, timeoutMs: 150, maxAttempts: 1 });
    await bus.start();
    const discarded = bus.lifecycle.waitFor('job:discarded');
    const id = await bus.transaction((tx) => bus.record(tx, 'audit.logged', { note: 'n' }));
    expect((await discarded).error).toBe('handler timed out after 150 ms and was aborted');
    const outcomes = await late.promise;
    expect(outcomes).not.toContain('written');
    await new Promise((r) => setTimeout(r, 50));
    expect(await target.query(`select note from "${s}".side_effects`)).toEqual([]);
    expect(await target.query(`select handler from "${s}".consumes where event_id = $1`, [id])).toEqual([]);
  });

  // PGlite runs a statement on the event loop's own thread: a slow one holds the whole process
  // (timers included), so only PostgreSQL can be cut in the middle of one.
  it.skipIf(!target.available || target.name !== 'postgres')('transactional: a statement still running at the timeout is cancelled; the job fails at once, nothing commits, and stop() is not held', async () => {
    const bus = await testBus(target, events);
    const s = bus.schema;
    await target.query(`create table "${s}".side_effects (note text)`);
    const statement = deferred<unknown>();
    bus.on('audit.logged', 'sleeper', async (_e, ctx) => {
      await ctx.tx!.query(`insert into "${s}".side_effects values ('before')`);
      await ctx.tx!.query('select pg_sleep(30)').catch((e: unknown) => (statement.resolve(e), null));
      await ctx.tx!.query(`insert into "${s}".side_effects values ('after')`);
    }, { transactional: true, timeoutMs: 300, maxAttempts: 1 });
    await bus.start();
    const discarded = bus.lifecycle.waitFor('job:discarded');
    const started = Date.now();
    const id = await bus.transaction((tx) => bus.record(tx, 'audit.logged', { note: 'n' }));
    expect((await discarded).error).toBe('handler timed out after 300 ms and was aborted');
    expect(Date.now() - started).toBeLessThan(3000);
    expect(await statement.promise).toBeInstanceOf(Error);
    const sleeping = await target.query(`select pid from pg_stat_activity where query = 'select pg_sleep(30)' and state = 'active'`);
    expect(sleeping).toEqual([]);
    expect(await target.query(`select note from "${s}".side_effects`)).toEqual([]);
    expect(await target.query(`select handler from "${s}".consumes where event_id = $1`, [id])).toEqual([]);
    const stopping = Date.now();
    await bus.stop({ timeoutMs: 500 });
    expect(Date.now() - stopping).toBeLessThan(2000);
  });

  test('an event a transactional handler records through ctx.tx wakes the relay when it commits, not at the next poll', async () => {
    // Slow polls: only a wake-up delivers the second event soon.
    const bus = await testBus(target, events, { relay: { maxPollMs: 10_000 }, worker: { maxPollMs: 10_000 } });
    bus.on('order.created', 'chain', async (e, ctx) => {
      await bus.record(ctx.tx!, 'audit.logged', { note: `after ${e.payload.orderNo}` });
    }, { transactional: true });
    const audited = deferred<number>();
    bus.on('audit.logged', 'audit', () => audited.resolve(performance.now()));
    const committed: number[] = [];
    bus.lifecycle.on('transaction:committed', (c) => committed.push(c.events));
    await bus.start();
    await new Promise((r) => setTimeout(r, 1500)); // the poll loops back off while idle
    const chained = bus.lifecycle.waitFor('job:completed', (c) => c.handler === 'chain');
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'C' }));
    await chained;
    const t0 = performance.now();
    expect((await audited.promise) - t0).toBeLessThan(1000);
    expect(committed).toEqual([1, 1]); // the caller's transaction, then the handler's
  });

  test('handlers run in the event trace; events they record inherit the trace id; idempotency key is eventId:handler', async () => {
    const bus = await testBus(target, events);
    let ctxSeen: HandlerContext | undefined;
    bus.on('order.created', 'chain', async (e, ctx) => {
      ctxSeen = ctx;
      await bus.transaction((tx) => bus.record(tx, 'audit.logged', { note: `after ${e.id}` }));
    });
    let auditTrace: string | null = null;
    bus.on('audit.logged', 'audit', (e) => {
      auditTrace = e.traceId;
    });
    await bus.start();
    const auditDone = bus.lifecycle.waitFor('job:completed', (j) => j.handler === 'audit');
    const traceId = 'ab'.repeat(16);
    const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'C' }, { traceId }));
    await auditDone;
    expect(auditTrace).toBe(traceId);
    expect(ctxSeen!.idempotencyKey).toBe(`${id}:chain`);
  });

  test('an event stored without a trace id (a capture trigger\'s) keeps one trace across retries and handlers', async () => {
    const bus = await testBus(target, events);
    const seen: { handler: string; attempt: number; trace: string | null }[] = [];
    bus.on('order.created', 'flaky', async (e, ctx) => {
      seen.push({ handler: 'flaky', attempt: ctx.attempt, trace: currentTraceId() });
      if (ctx.attempt === 1) await bus.transaction((tx) => bus.record(tx, 'audit.logged', { note: `first try of ${e.id}` }));
      if (ctx.attempt < 3) throw new Error(`down (try ${ctx.attempt})`);
    }, { backoff: quickBackoff });
    bus.on('order.created', 'steady', () => {
      seen.push({ handler: 'steady', attempt: 1, trace: currentTraceId() });
    });
    await bus.start();
    const done = bus.lifecycle.waitFor('job:completed', (j) => j.handler === 'flaky');
    // As a capture trigger writes it: no trace_id column.
    const [{ id }] = await target.query(
      `insert into "${bus.schema}".events (id, type, payload) values ("${bus.schema}".uuid_v7(), 'order.created', '{"orderNo":"T"}') returning id::text as id`,
    );
    bus.wake();
    await done;
    const expected = String(id).replace(/-/g, '');
    expect(seen.filter((s) => s.handler === 'flaky').map((s) => s.attempt)).toEqual([1, 2, 3]);
    expect(seen.map((s) => s.trace)).toEqual(seen.map(() => expected));
    const audits = (await bus.events.list({ type: 'audit.logged' })).items;
    expect(audits.map((a) => a.traceId)).toEqual([expected]);
  });

  test('an event without a subscriber is fanned out with zero jobs', async () => {
    const bus = await testBus(target, events);
    bus.on('order.created', 'only-orders', () => {});
    await bus.start();
    const fanned = bus.lifecycle.waitFor('relay:batch:fanned');
    const id = await bus.transaction((tx) => bus.record(tx, 'user.signed_up', { email: 'x@example.com' }));
    const batch = await fanned;
    expect(batch).toEqual({ eventIds: [id], jobs: 0, handedOff: 0 });
    expect((await bus.events.get(id))!.fannedOutAt).toBeInstanceOf(Date);
    expect(await bus.jobs.forEvent(id)).toEqual([]);
  });

  test('events recorded in a transaction rea did not see are found by polling', async () => {
    const bus = await testBus(target, events, { relay: { maxPollMs: 100 } });
    const seen: string[] = [];
    bus.on('order.created', 'poll', (e) => {
      seen.push(e.payload.orderNo);
    });
    await bus.start();
    const done = bus.lifecycle.waitFor('job:completed');
    // Record through a transaction of the driver's own (a pg client / PGlite tx): no wake-up is sent.
    await bus.driver.transaction((q) => bus.record(q, 'order.created', { orderNo: 'Q' }));
    await done;
    expect(seen).toEqual(['Q']);
  });

  // A rolling deploy: v2 shortens the handler's timeout and starts last, so the handlers row says
  // 100 ms; v1's worker still runs the job for up to its own 5 s. Its lease must cover that run.
  test.each(['claimed', 'handed off'])('a %s job is leased for the timeout of the worker running it, not the one the last process registered', async (path) => {
    const schema = freshSchema();
    const handOff = path === 'handed off';
    const common = { database: target.database(), schema, events, rescuer: { intervalMs: 50 } } as const;
    // Only v1's relay may hand off to v1's worker; for 'claimed' it fans out without hand-off.
    const v1 = createBus({ ...common, relay: { maxPollMs: 20, handOff }, worker: { maxPollMs: 20, leaseMarginMs: 200 } });
    const v2 = createBus({ ...common, relay: { enabled: !handOff, maxPollMs: 20 }, worker: { enabled: false, leaseMarginMs: 200 } });
    onTestFinished(async () => {
      await v1.stop({ timeoutMs: 2000 });
      await v2.stop();
      await target.query(`drop schema if exists "${schema}" cascade`);
    });
    await v1.migrate();
    const runs: number[] = [];
    const started = deferred();
    const release = deferred();
    v1.on('order.created', 'slow', async (_e, ctx) => {
      runs.push(ctx.attempt);
      started.resolve();
      await release.promise;
    }, { timeoutMs: 5000 });
    await v1.start();
    v2.on('order.created', 'slow', () => {}, { timeoutMs: 100 });
    await v2.start(); // the last to start writes the handlers row: lease 100 + 200 ms
    const handed: string[] = [];
    v1.lifecycle.on('jobs:handed-off', (e) => handed.push(...e.jobIds));
    const completed = v1.lifecycle.waitFor('job:completed');

    const id = await v1.transaction((tx) => v1.record(tx, 'order.created', { orderNo: 'L' }));
    await started.promise;
    const [row] = await target.query(
      `select attempted_at, lease_ms, extract(epoch from lease_expires_at - attempted_at) * 1000 as leased_for
       from "${schema}".jobs where event_id = $1`, [id]);
    expect(Number(row.leased_for)).toBe(5000 + 200);
    expect(row.lease_ms).toBe(5000 + 200); // the row tells the lease actually taken
    // The rescuer's statement at a moment past the lease v2 registered, while v1's run goes on.
    const later = new Date(row.attempted_at.getTime() + 1000);
    expect(await v1.driver.executor.jobRescue({ limit: 10, now: later })).toEqual({ rescued: 0, discarded: 0 });
    release.resolve();
    const done = await completed;
    expect(done.attempt).toBe(1);
    expect(runs).toEqual([1]);
    const [job] = await v1.jobs.forEvent(id);
    expect(job).toMatchObject({ state: 'completed', attempt: 1, errors: [] });
    expect(handed).toEqual(handOff ? [done.jobId] : []);
  });

  test('stop() aborts at its timeout even while transactional handlers hold every connection the relay and worker wait for', async () => {
    // The deadline began only after the relay and the worker's claim loop had stopped, and those
    // waited for a connection the handlers held: stop({ timeoutMs: 300 }) took the handlers' 3 s.
    const database = target.name === 'postgres' ? { postgres: PG_URL, poolSize: 2 } : target.database();
    const bus = await testBus(target, events, { database });
    const started = [deferred(), deferred()];
    for (const [i, name] of ['tx-1', 'tx-2'].entries()) {
      bus.on('order.created', name, async (_e, ctx) => {
        started[i]!.resolve();
        await ctx.tx!.query('select 1');
        await new Promise((r) => setTimeout(r, 3000)); // ignores ctx.signal
      }, { transactional: true, maxAttempts: 1 });
    }
    await bus.start();
    const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'T' }));
    // PGlite is one connection: the second handler waits for the first's transaction to end.
    await (target.name === 'postgres' ? Promise.all(started.map((d) => d.promise)) : started[0]!.promise);
    await new Promise((r) => setTimeout(r, 300)); // the relay and the claim loop poll, and wait for a connection
    const t0 = performance.now();
    await bus.stop({ timeoutMs: 300 });
    expect(performance.now() - t0).toBeLessThan(2000);
    const rows = await target.query(`select target, state, attempt, errors->0->>'name' as err from "${bus.schema}".jobs where event_id = $1 order by target`, [id]);
    expect(rows.map((r) => r.state)).toEqual(['retryable', 'retryable']);
    expect(rows.every((r) => r.attempt === 0)).toBe(true);
  });

  test('a claim still in flight when stop() began cannot take back the jobs the stop just returned to the queue', async () => {
    // The stop's failure write made the aborted job retryable (due now) before a claim sent
    // earlier reached the server: it waited for a pool connection, and pg's pool lets a new
    // request past its waiters while a connection it dropped (an aborted transactional handler's)
    // closes. That claim took the job and, the worker stopping, released it: 'available', its
    // retry bounced. Here the claim is held back in the process, as the pool's queue held it.
    const bus = await testBus(target, events, { worker: { minPollMs: 5, maxPollMs: 10 } });
    const started = deferred();
    bus.on('order.created', 'stuck', () => {
      started.resolve();
      return new Promise(() => {}); // ignores ctx.signal
    }, { timeoutMs: 60_000 });
    bus.on('order.paid', 'other', () => {}); // a target with room: the worker keeps claiming for it
    await bus.start();
    const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'C' }));
    await started.promise;
    const executor = bus.driver.executor;
    const claim = executor.jobClaim.bind(executor);
    const held = deferred();
    const gate = deferred();
    executor.jobClaim = async (p) => {
      held.resolve();
      await gate.promise;
      return claim(p);
    };
    await held.promise;
    const stopped = bus.stop({ timeoutMs: 50 });
    // The abort comes at 50 ms; its failure is written unless it waits for the claim.
    await Promise.race([bus.lifecycle.waitFor('job:failed'), new Promise((r) => setTimeout(r, 300))]);
    gate.resolve();
    await stopped;
    const rows = await target.query(`select state, attempt, errors->0->>'name' as err from "${bus.schema}".jobs where event_id = $1`, [id]);
    expect(rows).toEqual([{ state: 'retryable', attempt: 0, err: 'WorkerStoppingError' }]);
  });

  test('a run that fails after the rescuer took its job back is not reported as job:discarded or job:failed', async () => {
    // The failure write changes nothing then (the row is no longer this attempt's running one),
    // yet every failure written was announced: a job the rescuer had made retryable (or another
    // worker was running) was reported dead-lettered to whoever listens for job:discarded.
    const bus = await testBus(target, events);
    const started = deferred();
    const fail = deferred();
    bus.on('order.created', 'late', async () => {
      started.resolve();
      await fail.promise;
      throw permanent(new Error('gave up after the lease'));
    }, { timeoutMs: 60_000 });
    await bus.start();
    const signals: string[] = [];
    bus.lifecycle.on('job:discarded', (e) => signals.push(`discarded ${e.attempt}`));
    bus.lifecycle.on('job:failed', (e) => signals.push(`failed ${e.attempt}`));
    const executor = bus.driver.executor;
    const failMany = executor.jobFailMany.bind(executor);
    const written = deferred();
    executor.jobFailMany = async (p) => {
      const r = await failMany(p);
      written.resolve();
      return r;
    };
    const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'R' }));
    await started.promise;
    const [row] = await target.query(`select lease_expires_at from "${bus.schema}".jobs where event_id = $1`, [id]);
    // The rescuer's statement at a moment past the lease, while the run goes on (a frozen process, a clock jump).
    const later = new Date(row.lease_expires_at.getTime() + 1);
    expect(await executor.jobRescue({ limit: 10, now: later })).toEqual({ rescued: 1, discarded: 0 });
    fail.resolve();
    await written.promise;
    await new Promise((r) => setImmediate(r)); // the write's signals, had it any, are out by now
    const [job] = await bus.jobs.forEvent(id);
    expect(job).toMatchObject({ state: 'retryable', attempt: 1 });
    expect(job!.errors.map((e) => e.name)).toEqual(['LeaseExpired']);
    expect(signals).toEqual([]);
  });

  test('stop() waits for running handlers, then aborts those past its timeout and returns them to the queue', async () => {
    const bus = await testBus(target, events);
    let finished = 0;
    const started = { quick: deferred(), stuck: deferred() };
    bus.on('order.created', 'quick', async () => {
      started.quick.resolve();
      await new Promise((r) => setTimeout(r, 50));
      finished++;
    });
    bus.on('order.paid', 'stuck', () => {
      started.stuck.resolve();
      return new Promise(() => {});
    }, { timeoutMs: 60_000 });
    await bus.start();
    const ids = await bus.transaction(async (tx) => [
      await bus.record(tx, 'order.created', { orderNo: 'S1' }),
      await bus.record(tx, 'order.paid', { orderNo: 'S1', amount: 1 }),
    ]);
    await Promise.all([started.quick.promise, started.stuck.promise]);
    await bus.stop({ timeoutMs: 300 });
    expect(finished).toBe(1);
    const rows = await target.query(`select target, state, errors->0->>'name' as err from "${bus.schema}".jobs where event_id = any($1::uuid[]) order by target`, [ids]);
    expect(rows).toEqual([
      { target: 'quick', state: 'completed', err: null },
      { target: 'stuck', state: 'retryable', err: 'WorkerStoppingError' },
    ]);
  });
});
