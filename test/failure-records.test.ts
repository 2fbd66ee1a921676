// What a failing job can never do to the others: an error the database cannot store, a backoff
// that returns no number, a shutdown at the last attempt, a webhook answer with a NUL byte. And the
// pieces underneath: the batcher's isolation of a refused item, the maintenance runner's restart.
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { Batcher } from '../src/core/batcher.js';
import { storable } from '../src/core/errors-format.js';
import { defineEvents, permanent, retryAfter } from '../src/index.js';
import { MaintenanceLane, ServiceRunner } from '../src/maintenance/service.js';
import { describeTargets, postgresTarget, quickBackoff, testBus } from './helpers/db.js';
import { replyLosingProxy } from './helpers/faults.js';
import { receiver } from './helpers/http.js';
import { captureLogger } from './helpers/log.js';
import { deferred } from './helpers/signals.js';

const events = defineEvents({ 'task.queued': z.object({ n: z.number() }) });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describeTargets('failure records on $name', (target) => {
  const test = it.skipIf(!target.available);

  test("a failed attempt's log line names the error's class (err_name) beside its message, as the stored error entry does", async () => {
    const lines: Record<string, unknown>[] = [];
    const bus = await testBus(target, events, { logger: captureLogger(lines) });
    class CarrierRejected extends Error {
      override name = 'CarrierRejected';
    }
    bus.on('task.queued', 'ship', async () => {
      throw new CarrierRejected('no such postcode');
    }, { maxAttempts: 1 });
    await bus.start();
    const discarded = bus.lifecycle.waitFor('job:discarded');
    await bus.transaction((tx) => bus.record(tx, 'task.queued', { n: 1 }));
    // The signal names it too, for a listener that counts failures by kind.
    expect(await discarded).toMatchObject({ error: 'no such postcode', errorName: 'CarrierRejected', handler: 'ship' });
    const line = lines.find((l) => l.msg === 'job discarded');
    expect(line).toMatchObject({ level: 'warn', err: 'no such postcode', err_name: 'CarrierRejected', handler: 'ship' });
  });

  test('every error entry\'s `at` is written as toISOString() writes it (UTC, milliseconds, Z), the ones rea\'s SQL dates and the ones the worker dates alike', async () => {
    const bus = await testBus(target, events);
    bus.on('task.queued', 'ship', async () => {
      throw new Error('no such postcode');
    }, { maxAttempts: 2, backoff: () => 60_000 });
    await bus.start();
    const failed = bus.lifecycle.waitFor('job:failed');
    await bus.transaction((tx) => bus.record(tx, 'task.queued', { n: 1 }));
    const { jobId } = await failed;
    // An operator discards the waiting retry: an entry written by SQL alone.
    expect(await bus.jobs.discard([jobId])).toEqual([jobId]);
    const [row] = await target.query<{ errors: { at: string; name?: string }[] }>(`select errors from "${bus.schema}".jobs where id = $1`, [jobId]);
    expect(row!.errors.map((e) => e.name)).toEqual(['Error', 'DiscardedByOperator']);
    for (const { at } of row!.errors) {
      expect(at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      expect(new Date(at).toISOString()).toBe(at);
    }
  });

  test('permanent(err) and retryAfter(ms, err) store the error they wrap (its name and stack), not the wrapper', async () => {
    const lines: Record<string, unknown>[] = [];
    const bus = await testBus(target, events, { logger: captureLogger(lines) });
    bus.on('task.queued', 'perm', () => {
      throw permanent(new TypeError('bad input'));
    });
    bus.on('task.queued', 'later', () => {
      throw retryAfter(60_000, new RangeError('slow down'));
    });
    // A reason that is no Error has no name or stack: the wrapper's say how and where it was thrown.
    bus.on('task.queued', 'said', () => {
      throw permanent('no such customer');
    });
    const discarded = new Map<string, string>();
    const bothDiscarded = deferred();
    bus.lifecycle.on('job:discarded', (e) => {
      discarded.set(e.handler, e.error);
      if (discarded.size === 2) bothDiscarded.resolve();
    });
    const failed = bus.lifecycle.waitFor('job:failed', (e) => e.handler === 'later');
    await bus.start();
    const id = await bus.transaction((tx) => bus.record(tx, 'task.queued', { n: 1 }));
    const [f] = await Promise.all([failed, bothDiscarded.promise]);

    const jobs = Object.fromEntries((await bus.jobs.forEvent(id)).map((j) => [j.target, j]));
    // Before, these were stored as PermanentError and RetryAfterError, with the wrapper's stack.
    expect(jobs.perm!.errors).toEqual([expect.objectContaining({ name: 'TypeError', message: 'bad input' })]);
    expect(jobs.perm!.errors[0]!.stack).toMatch(/^TypeError: bad input\n/);
    expect(jobs.later!.errors).toEqual([expect.objectContaining({ name: 'RangeError', message: 'slow down' })]);
    expect(jobs.later!.errors[0]!.stack).toMatch(/^RangeError: slow down\n/);
    expect(jobs.said!.errors).toEqual([expect.objectContaining({ name: 'PermanentError', message: 'no such customer' })]);
    expect(jobs.said!.errors[0]!.stack).toMatch(/^PermanentError: no such customer\n/);
    // The lifecycle signals and the log line say the same.
    expect(discarded).toEqual(new Map([['perm', 'bad input'], ['said', 'no such customer']]));
    expect(f.error).toBe('slow down');
    expect(lines.find((l) => l.msg === 'job discarded' && l.handler === 'perm')).toMatchObject({ err: 'bad input', err_name: 'TypeError' });
    expect(lines.find((l) => l.msg === 'job failed; will retry' && l.handler === 'later')).toMatchObject({ err: 'slow down', err_name: 'RangeError' });
  });

  test('errors PostgreSQL cannot store as they are (NUL, a lone surrogate, an emoji at the 2,000-character cut) are stored cleaned, and nobody else waits', async () => {
    const bus = await testBus(target, events, { worker: { completionFlushMs: 5 } });
    const throwers: Record<string, () => Error> = {
      nul: () => new Error('bad byte \u0000 here'),
      lone: () => new Error('half a pair: \uD83D!'),
      emoji: () => new Error(`${'x'.repeat(1998)}😀 and more`),
      name: () => Object.assign(new Error('odd name'), { name: 'Bad\u0000Name' }),
    };
    for (const [name, make] of Object.entries(throwers)) {
      bus.on('task.queued', name, () => { throw make(); }, { maxAttempts: 1 });
    }
    let goodRuns = 0;
    bus.on('task.queued', 'good', () => {
      if (++goodRuns === 1) throw new Error('plain failure');
    }, { backoff: quickBackoff });
    const discarded = new Set<string>();
    const allDiscarded = deferred();
    bus.lifecycle.on('job:discarded', (e) => {
      discarded.add(e.handler);
      if (discarded.size === Object.keys(throwers).length) allDiscarded.resolve();
    });
    const goodDone = bus.lifecycle.waitFor('job:completed', (e) => e.handler === 'good');
    await bus.start();
    const id = await bus.transaction((tx) => bus.record(tx, 'task.queued', { n: 1 }));
    await Promise.all([allDiscarded.promise, goodDone]);

    const jobs = Object.fromEntries((await bus.jobs.forEvent(id)).map((j) => [j.target, j]));
    expect(jobs.nul!.errors[0]!.message).toBe('bad byte \uFFFD here');
    expect(jobs.lone!.errors[0]!.message).toBe('half a pair: \uFFFD!');
    const cut = jobs.emoji!.errors[0]!.message;
    expect(cut).toBe(`${'x'.repeat(1998)}…`); // the emoji would have been split: it is left out whole
    expect(jobs.name!.errors[0]!.name).toBe('Bad\uFFFDName');
    expect(jobs.good).toMatchObject({ state: 'completed', attempt: 2 });
    expect(jobs.good!.errors.map((e) => e.message)).toEqual(['plain failure']);
  });

  test('a backoff that returns no number or throws is logged, and the job retries on the default schedule', async () => {
    const lines: Record<string, unknown>[] = [];
    const bus = await testBus(target, events, { logger: captureLogger(lines) });
    const backoffs: Record<string, () => number> = {
      nan: () => NaN,
      missing: () => undefined as unknown as number,
      throws: () => { throw new Error('backoff bug'); },
      huge: () => 1e300,
    };
    for (const [name, backoff] of Object.entries(backoffs)) {
      bus.on('task.queued', name, () => { throw new Error('fails'); }, { backoff });
    }
    const failed = new Map<string, Date | null>();
    const allFailed = deferred();
    bus.lifecycle.on('job:failed', (e) => {
      failed.set(e.handler, e.retryAt);
      if (failed.size === Object.keys(backoffs).length) allFailed.resolve();
    });
    await bus.start();
    const before = Date.now();
    const id = await bus.transaction((tx) => bus.record(tx, 'task.queued', { n: 1 }));
    await allFailed.promise;

    const jobs = Object.fromEntries((await bus.jobs.forEvent(id)).map((j) => [j.target, j]));
    for (const name of ['nan', 'missing', 'throws']) {
      expect(jobs[name]).toMatchObject({ state: 'retryable', attempt: 1 });
      // The default schedule: 5 s plus up to 30 s of jitter after the first failure.
      const wait = failed.get(name)!.getTime() - before;
      expect(wait).toBeGreaterThanOrEqual(4_000);
      expect(wait).toBeLessThan(40_000);
    }
    // Past a year, the wait is cut to one year rather than becoming an invalid date.
    const year = 365 * 24 * 3600_000;
    expect(failed.get('huge')!.getTime() - before).toBeGreaterThan(year - 60_000);
    expect(failed.get('huge')!.getTime() - before).toBeLessThan(year + 60_000);
    const complaints = lines.filter((l) => l.level === 'error' && String(l.msg).startsWith('the backoff gave no delay'));
    expect(complaints.map((l) => l.handler).sort()).toEqual(['missing', 'nan', 'throws']);
    expect(complaints.find((l) => l.handler === 'throws')!.backoff_result).toBe('backoff bug');
  });

  test('a shutdown that cuts the last attempt short does not use it up', async () => {
    const bus = await testBus(target, events);
    const started = deferred();
    bus.on('task.queued', 'once', () => {
      started.resolve();
      return new Promise(() => {});
    }, { maxAttempts: 1, timeoutMs: 60_000 });
    await bus.start();
    const id = await bus.transaction((tx) => bus.record(tx, 'task.queued', { n: 1 }));
    await started.promise;
    await bus.stop({ timeoutMs: 100 });
    // (A stopped bus has closed the pool it made: read as an operator would.)
    const [stopped] = await target.query(`select state, attempt, errors from "${bus.schema}".jobs where event_id = $1`, [id]);
    expect(stopped).toMatchObject({ state: 'retryable', attempt: 0 });
    expect(stopped.errors.map((e: { name: string }) => e.name)).toEqual(['WorkerStoppingError']);

    // The next process runs it as attempt 1 of 1, and a failure there is the job's one real try.
    const next = await testBus(target, events, { schema: bus.schema });
    const attempts: number[] = [];
    next.on('task.queued', 'once', (_e, ctx) => {
      attempts.push(ctx.attempt);
      throw new Error('real failure');
    }, { maxAttempts: 1 });
    const gone = next.lifecycle.waitFor('job:discarded');
    await next.start();
    await gone;
    expect(attempts).toEqual([1]);
    expect((await next.jobs.forEvent(id))[0]).toMatchObject({ state: 'discarded', attempt: 1 });
  });

  test('a run that ends after the rescuer took its job back is not reported completed (only the run that counts is)', async () => {
    const lines: Record<string, unknown>[] = [];
    const bus = await testBus(target, events, { logger: captureLogger(lines) });
    const runs: number[] = [];
    bus.on('task.queued', 'late', async (_e, ctx) => {
      runs.push(ctx.attempt);
      // As if this run's lease had expired meanwhile (a database outage held its completion back)
      // and the rescuer had returned the job to the queue.
      if (ctx.attempt === 1) await target.query(`update "${bus.schema}".jobs set state = 'retryable', lease_expires_at = null where id = $1`, [ctx.jobId]);
    }, { maxAttempts: 3 });
    const completed: number[] = [];
    bus.lifecycle.on('job:completed', (e) => void completed.push(e.attempt));
    const second = bus.lifecycle.waitFor('job:completed', (e) => e.attempt === 2);
    await bus.start();
    const id = await bus.transaction((tx) => bus.record(tx, 'task.queued', { n: 1 }));
    await second;
    expect(runs).toEqual([1, 2]);
    expect(completed).toEqual([2]);
    expect((await bus.jobs.forEvent(id))[0]).toMatchObject({ state: 'completed', attempt: 2 });
    expect(lines.some((l) => l.level === 'warn' && String(l.msg).startsWith('a job finished after its lease expired'))).toBe(true);
  });

  // The job's row as another worker leaves it once it has run the job at the same attempt number
  // (given back uncounted, by a release or a stop's refund, and taken again) and completed it.
  const completedByAnother = (schema: string, jobId: string) => target.query(
    `update "${schema}".jobs set state = 'completed', attempted_by = 'another-worker', finalized_at = now(), lease_expires_at = null where id = $1`, [jobId]);

  test('a failed run whose job another worker completed at the same attempt is not taken for this run\'s own completion (a lost COMMIT reply)', async () => {
    const lines: Record<string, unknown>[] = [];
    const bus = await testBus(target, events, { logger: captureLogger(lines) });
    bus.on('task.queued', 'ship', async (_e, ctx) => {
      await completedByAnother(bus.schema, ctx.jobId);
      throw new Error('carrier down');
    }, { maxAttempts: 3 });
    const completed: number[] = [];
    bus.lifecycle.on('job:completed', (e) => void completed.push(e.attempt));
    await bus.start();
    await bus.transaction((tx) => bus.record(tx, 'task.queued', { n: 1 }));
    const told = (l: Record<string, unknown>) => l.level === 'warn' && /^a job failed after its lease expired|^a job's completion had committed although its reply was lost/.test(String(l.msg));
    await expect.poll(() => lines.some(told)).toBe(true);
    // Before: 'its completion had committed although its reply was lost', and job:completed for this failed run.
    expect(lines.find(told)).toMatchObject({ msg: expect.stringMatching(/^a job failed after its lease expired/), attempt: 1, now: 'completed, attempt 1 by another-worker' });
    expect(completed).toEqual([]);
  });

  test('a finished run whose job another worker completed at the same attempt is not reported completed by this one', async () => {
    const lines: Record<string, unknown>[] = [];
    const bus = await testBus(target, events, { logger: captureLogger(lines) });
    bus.on('task.queued', 'ship', async (_e, ctx) => {
      await completedByAnother(bus.schema, ctx.jobId);
    }, { maxAttempts: 3 });
    const completed: number[] = [];
    bus.lifecycle.on('job:completed', (e) => void completed.push(e.attempt));
    await bus.start();
    await bus.transaction((tx) => bus.record(tx, 'task.queued', { n: 1 }));
    const told = (l: Record<string, unknown>) => l.level === 'warn' && String(l.msg).startsWith('a job finished after its lease expired');
    await expect.poll(() => lines.some(told)).toBe(true);
    expect(lines.find(told)).toMatchObject({ attempt: 1, now: 'completed, attempt 1 by another-worker' });
    expect(completed).toEqual([]);
  });

  test('a webhook answer with a NUL byte is a success like any other (its excerpt is stored cleaned)', async () => {
    const bus = await testBus(target, events, { webhooks: { allowPrivateNetworks: true } });
    const r = await receiver((_q, res) => res.end(Buffer.from('ok\u0000\u0001', 'utf8')));
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['task.queued'] });
    const done = bus.lifecycle.waitFor('job:completed');
    await bus.start();
    const id = await bus.transaction((tx) => bus.record(tx, 'task.queued', { n: 1 }));
    await done;
    expect(r.received).toHaveLength(1);
    expect((await bus.jobs.forEvent(id))[0]).toMatchObject({ state: 'completed', attempt: 1 });
    const [attempt] = await target.query(`select outcome, response_excerpt from "${bus.schema}".webhook_attempts where endpoint_id = $1`, [ep.id]);
    expect(attempt).toEqual({ outcome: 'success', response_excerpt: 'ok\uFFFD\u0001' });
  });
});

it.runIf(postgresTarget.available)('a failure whose write failed, and whose job the rescuer returned at the same attempt before it was sent again, is not taken for stored: the run says its lease expired, and no job:failed is told for it', async () => {
  const lines: Record<string, unknown>[] = [];
  const bus = await testBus(postgresTarget, events, { logger: captureLogger(lines) });
  const s = `"${bus.schema}"`;
  bus.on('task.queued', 'ship', async (_e, ctx) => {
    throw new Error('carrier down');
  }, { maxAttempts: 3, backoff: () => 60_000 });
  const executor = bus.driver.executor;
  const failMany = executor.jobFailMany.bind(executor);
  let first = true;
  vi.spyOn(executor, 'jobFailMany').mockImplementation(async (p) => {
    if (first) {
      first = false;
      // Nothing written, and meanwhile the job's lease expires and the rescuer returns it: the
      // same state and attempt the failure would have stored, with the rescuer's entry.
      await postgresTarget.query(`update ${s}.jobs set lease_expires_at = now() - interval '1 second' where id = $1`, [p.failures[0]!.id]);
      expect(await executor.jobRescue({ limit: 10, now: null })).toMatchObject({ rescued: 1 });
      // Not claimed again before the write is sent again (the race this pins down): due later.
      await postgresTarget.query(`update ${s}.jobs set scheduled_at = now() + interval '1 hour' where id = $1`, [p.failures[0]!.id]);
      throw new Error('Connection terminated unexpectedly');
    }
    return failMany(p);
  });
  const failed: number[] = [];
  bus.lifecycle.on('job:failed', (e) => void failed.push(e.attempt));
  await bus.start();
  await bus.transaction((tx) => bus.record(tx, 'task.queued', { n: 1 }));
  await vi.waitFor(() => expect(lines.some((l) => /^a job failed after its lease expired/.test(String(l.msg)))).toBe(true), { timeout: 5000 });
  expect(failed).toEqual([]);
  expect(lines.filter((l) => l.msg === 'job failed; will retry')).toEqual([]);
});

it.runIf(postgresTarget.available)('a transactional handler whose COMMIT reply is lost: its run fails waiting, yet the job is completed once, reported completed once, and the log says so (not that the rescuer took it)', async () => {
  const proxy = await replyLosingProxy();
  const lines: Record<string, unknown>[] = [];
  const bus = await testBus(postgresTarget, events, {
    database: { postgres: proxy.url, poolSize: 4, queryTimeoutMs: 1000 }, logger: captureLogger(lines),
  });
  const s = `"${bus.schema}"`;
  await postgresTarget.query(`create table ${s}.effects (n int, attempt int)`);
  bus.on('task.queued', 'ledger', async (e, ctx) => {
    await ctx.tx!.query(`insert into ${s}.effects values ($1, $2)`, [e.payload.n, ctx.attempt]);
    // The server commits this transaction; its answer never reaches rea.
    proxy.loseCommitReplyAfter('lose-this-commit');
    await ctx.tx!.query(`select 'lose-this-commit'`);
  }, { transactional: true, timeoutMs: 1000, maxAttempts: 3 });
  const signals: string[] = [];
  for (const name of ['job:completed', 'job:failed', 'job:discarded'] as const) {
    bus.lifecycle.on(name, (e) => void signals.push(`${name} ${e.attempt}`));
  }
  const completed = bus.lifecycle.waitFor('job:completed', undefined, 15_000);
  await bus.start();
  const id = await bus.transaction((tx) => bus.record(tx, 'task.queued', { n: 7 }));
  await completed;
  const told = (l: Record<string, unknown>) => l.level === 'warn' && String(l.msg).startsWith('a job\'s completion had committed although its reply was lost');
  await expect.poll(() => lines.some(told)).toBe(true);
  expect(lines.find(told)).toMatchObject({ attempt: 1, now: 'completed, attempt 1' });
  // Before: 'a job failed after its lease expired; the rescuer had already returned it', of a job
  // whose lease had not expired and that had completed, and no job:completed at all.
  expect(lines.some((l) => String(l.msg).includes('lease expired'))).toBe(false);
  expect((await bus.jobs.forEvent(id))[0]).toMatchObject({ state: 'completed', attempt: 1 });
  expect(await postgresTarget.query(`select n, attempt from ${s}.effects`)).toEqual([{ n: 7, attempt: 1 }]);
  await bus.stop();
  expect(signals).toEqual(['job:completed 1']);
}, 30_000);

describe('storable text', () => {
  it('keeps valid text (pairs included) and replaces only NUL and lone surrogates', () => {
    expect(storable('plain ✓ 😀')).toBe('plain ✓ 😀');
    expect(storable('\u0000a\uDC00b\uD800')).toBe('\uFFFDa\uFFFDb\uFFFD');
  });
});

describe('batcher isolation', () => {
  const refusing = (bad: Set<string>, written: string[][]) => async (items: string[]) => {
    const refused = items.find((i) => bad.has(i));
    if (refused) throw Object.assign(new Error(`refused ${refused}`), { transient: false });
    written.push(items);
  };

  it('a batch refused for one item is written item by item; the refused one goes to onRefused, not back in the queue', async () => {
    const written: string[][] = [];
    const refused: string[] = [];
    const errors: unknown[] = [];
    const b = new Batcher<string>({
      flushMs: 1_000, maxBatch: 10, write: refusing(new Set(['bad']), written), onError: (e) => errors.push(e),
      isolate: { isTransient: () => false, onRefused: (item) => refused.push(item) },
    });
    for (const i of ['a', 'bad', 'c']) b.push(i);
    await b.flush();
    expect(written).toEqual([['a'], ['c']]);
    expect(refused).toEqual(['bad']);
    expect(b.pending).toBe(0);
    expect(errors).toEqual([]);
    b.push('d');
    await b.flush();
    expect(written.at(-1)).toEqual(['d']);
  });

  it('a transient error keeps every item for the next try (the database is away, nothing is refused)', async () => {
    let down = true;
    const written: string[][] = [];
    const refused: string[] = [];
    const b = new Batcher<string>({
      flushMs: 1_000, maxBatch: 10,
      write: async (items) => {
        if (down) throw new Error('connection refused');
        written.push(items);
      },
      onError: () => {},
      isolate: { isTransient: () => true, onRefused: (item) => refused.push(item) },
    });
    b.push('a');
    b.push('b');
    await b.flush();
    expect(b.pending).toBe(2);
    down = false;
    await b.flush();
    expect(written).toEqual([['a', 'b']]);
    expect(refused).toEqual([]);
  });
});

describe('maintenance runner', () => {
  const log = { debug() {}, info() {}, warn() {}, error() {}, child() { return log; } };

  it('stopped and started again during a pass (leadership lost and regained) keeps one chain, never two passes at once', async () => {
    let running = 0;
    let maxConcurrent = 0;
    let passes = 0;
    const runner = new ServiceRunner({
      name: 'x',
      intervalMs: 50,
      runOnce: async () => {
        passes++;
        running++;
        maxConcurrent = Math.max(maxConcurrent, running);
        await sleep(40);
        running--;
      },
    }, log);
    runner.start();
    await sleep(10); // the first pass is in flight
    void runner.stop();
    runner.start();
    await sleep(500);
    await runner.stop();
    const after = passes;
    await sleep(200);
    expect(maxConcurrent).toBe(1);
    // One chain: a pass every ~90 ms (40 ms of work, 50 ms apart) → about 6 in 500 ms; two chains would make about 11.
    expect(after).toBeLessThanOrEqual(8);
    expect(passes).toBe(after); // nothing runs after stop()
  });

  it('an interval longer than a Node timer keeps (a monthly rule) waits for it, not 1 ms', async () => {
    let passes = 0;
    const runner = new ServiceRunner({ name: 'monthly', intervalMs: 30 * 24 * 3600_000, runOnce: async () => { passes++; } }, log);
    runner.start();
    await sleep(300);
    await runner.stop();
    expect(passes).toBe(1);
  });

  it('a pass that fails while the runner is stopped (leadership lost as PostgreSQL restarts): stop() resolves, the failure is logged once', async () => {
    const warnings: unknown[] = [];
    const watched = { ...log, warn(o: unknown, msg: string) { warnings.push([msg, o]); } };
    let fail!: (err: Error) => void;
    const runner = new ServiceRunner({
      name: 'rescuer',
      intervalMs: 60_000,
      runOnce: () => new Promise((_, reject) => (fail = reject)),
    }, watched);
    runner.start();
    await sleep(10); // the pass is at work
    const unbounded = runner.stop(); // as the leader does on losing the lease: nobody awaits it
    const bounded = runner.stop(1000); // as bus.stop() does
    fail(new Error('the database system is shutting down'));
    await expect(unbounded).resolves.toBeUndefined();
    await expect(bounded).resolves.toBeUndefined();
    expect(warnings).toEqual([['maintenance pass failed', { err: 'the database system is shutting down', service: 'rescuer' }]]);
  });

  it('a pass queued in the lane behind another service\'s is not waited for at stop, never runs, and logs no warning', async () => {
    const warnings: string[] = [];
    const watched = { ...log, warn(_o: unknown, msg: string) { warnings.push(msg); } };
    const lane = new MaintenanceLane();
    let release!: () => void;
    const long = new Promise<void>((r) => (release = r));
    let longStarted = false;
    let queuedRan = 0;
    const busy = new ServiceRunner({ name: 'retention', intervalMs: 60_000, runOnce: async () => { longStarted = true; await long; } }, watched, lane);
    const queued = new ServiceRunner({ name: 'vacuum', intervalMs: 60_000, runOnce: async () => { queuedRan++; } }, watched, lane);
    busy.start();
    await sleep(5);
    queued.start();
    await sleep(20); // its pass is queued behind the long one
    expect(longStarted).toBe(true);
    const t0 = performance.now();
    await queued.stop(200);
    expect(performance.now() - t0).toBeLessThan(100);
    expect(warnings).toEqual([]);
    release();
    await busy.stop();
    await sleep(20);
    expect(queuedRan).toBe(0);

    // A pass at work is still waited for, up to the limit, and then named in the warning.
    const stuck = new ServiceRunner({ name: 'endpoint-health', intervalMs: 60_000, runOnce: () => new Promise(() => {}) }, watched, lane);
    stuck.start();
    await sleep(20);
    const t1 = performance.now();
    await stuck.stop(100);
    expect(performance.now() - t1).toBeGreaterThanOrEqual(90);
    expect(warnings).toEqual(['maintenance pass still running at stop; not waiting for it']);
  });
});
