// Retention with an injected clock: every rule's window, the rows it must never touch (unfanned,
// poisoned, events whose jobs still wait), archive mode, bounded batches, -1 = keep, registered
// application tables, dry runs, the consume-record window, and the leader running it on its own.
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { z } from 'zod';
import { defineEvents, exponentialBackoff, ManualClock, OptionsError } from '../src/index.js';
import { backoffUpperBound } from '../src/core/backoff.js';
import { consumeRetentionMs, handlerScheduleMs, parseDuration } from '../src/maintenance/retention.js';
import { describeTargets, freshSchema, PG_URL, testBus, type Target } from './helpers/db.js';

const events = defineEvents({
  'note.saved': z.object({ n: z.number() }),
  'order.created': z.object({ n: z.number() }),
});

const HOUR = 3600_000;
const DAY = 24 * HOUR;
// Rules run only when asked in these tests; the leader never starts.
const quiet = { relay: { enabled: false }, worker: { enabled: false } } as const;

async function record(bus: { transaction: any; recordMany: any }, n: number, type: 'note.saved' | 'order.created' = 'note.saved'): Promise<string[]> {
  return bus.transaction((tx: unknown) => bus.recordMany(tx, Array.from({ length: n }, (_, i) => ({ type, payload: { n: i } }))));
}

async function ids(target: Target, schema: string, table = 'events'): Promise<string[]> {
  return (await target.query<{ id: string }>(`select id::text as id from "${schema}".${table} order by id`)).map((r) => r.id);
}

describe('retention windows (pure)', () => {
  it('a handler schedule is every lease plus every backoff upper bound; consumes keep 2 × schedule + the longer retry window', () => {
    const backoff = exponentialBackoff({ baseMs: 1000, factor: 2, jitterMs: 500 });
    expect(backoffUpperBound(backoff, 3)).toBe(4000 + 500);
    // 3 attempts: 3 leases of 10 s, backoffs after attempts 1 and 2: (1 s + 0.5) + (2 s + 0.5).
    expect(handlerScheduleMs({ maxAttempts: 3, leaseMs: 10_000, backoff })).toBe(30_000 + 1500 + 2500);
    expect(consumeRetentionMs({ scheduleMs: 60_000, discardedMs: 7 * DAY, cancelledMs: DAY })).toBe(120_000 + 7 * DAY);
    expect(consumeRetentionMs({ scheduleMs: 60_000, discardedMs: -1, cancelledMs: DAY })).toBe(-1);
    // A custom function without a known bound: sampled, then doubled.
    expect(backoffUpperBound(() => 100, 1)).toBe(200);
  });

  it('a backoff bound is whole ms, as the worker waits it: cut at a year, the default schedule where the function fails', () => {
    const YEAR = 365 * DAY;
    expect(backoffUpperBound((n) => 1000 * Math.E ** n, 1)).toBe(Math.ceil(2 * 1000 * Math.E));
    expect(backoffUpperBound((n) => 1000 * 10 ** n, 30)).toBe(YEAR);
    expect(backoffUpperBound(exponentialBackoff({ baseMs: 1000, factor: 1.5, jitterMs: 0, maxMs: 10 * YEAR }), 100)).toBe(YEAR);
    expect(backoffUpperBound(exponentialBackoff({ baseMs: 1000, factor: 1.5, jitterMs: 0 }), 4)).toBe(3375);
    const defaultBound = backoffUpperBound(exponentialBackoff(), 2);
    expect(backoffUpperBound(() => { throw new Error('bug'); }, 2)).toBe(defaultBound);
    expect(backoffUpperBound(() => NaN, 2)).toBe(defaultBound);
    expect(backoffUpperBound((() => undefined) as unknown as () => number, 2)).toBe(defaultBound);
  });

  it('durations: ms or 90s / 15m / 24h / 7d, -1 for keep; anything else names the field', () => {
    expect(parseDuration('90s', 'f')).toBe(90_000);
    expect(parseDuration('24h', 'f')).toBe(DAY);
    expect(parseDuration('7d', 'f')).toBe(7 * DAY);
    expect(parseDuration(-1, 'f')).toBe(-1);
    expect(() => parseDuration('soon', 'retention.register(x).olderThan')).toThrow(/retention\.register\(x\)\.olderThan/);
    expect(() => parseDuration(0, 'f')).toThrow(OptionsError);
    expect(() => parseDuration('40000d', 'f')).toThrow(/longer than 100 years; use -1 to keep forever/);
  });
});

describe('retention intervals', () => {
  it('a rule runs at most once a second: a shorter every (ms or a duration) is refused naming the field; -1 still means by hand', async () => {
    // every: 1 passed, and the leader ran the rule's delete pass back to back against the database.
    const { createBus } = await import('../src/index.js');
    const bus = createBus({ database: { pglite: 'memory://' }, events });
    onTestFinished(() => bus.stop());
    for (const every of [1, 999, '500ms', '0s']) {
      let caught: unknown;
      try { bus.retention.register({ table: 'visits', timeColumn: 'seen_at', olderThan: '30d', every }); } catch (err) { caught = err; }
      expect(caught, String(every)).toBeInstanceOf(OptionsError);
      expect((caught as OptionsError).field).toBe('retention.register(visits).every');
    }
    expect(() => bus.retention.register({ table: 'visits', timeColumn: 'seen_at', olderThan: '30d', every: 1 }))
      .toThrow('invalid option retention.register(visits).every: 1 is shorter than 1000 ms');
    bus.retention.register({ table: 'visits', timeColumn: 'seen_at', olderThan: '30d', every: '1s' });
    bus.retention.register({ table: 'pages', timeColumn: 'seen_at', olderThan: '30d', every: -1 });
    // The same floor for rea's own rules and the default interval of registered tables.
    for (const [retention, field] of [
      [{ appEveryMs: 1 }, 'createBus.retention.appEveryMs'],
      [{ events: { everyMs: 999 } }, 'createBus.retention.events.everyMs'],
      [{ jobs: { everyMs: 10 } }, 'createBus.retention.jobs.everyMs'],
      [{ consumes: { everyMs: 1 } }, 'createBus.retention.consumes.everyMs'],
    ] as const) {
      expect(() => createBus({ database: { pglite: 'memory://' }, events, retention }))
        .toThrow(new OptionsError(field, 'at least 1000 ms (1 s), or -1 to run only by hand'));
    }
    await createBus({ database: { pglite: 'memory://' }, events, retention: { appEveryMs: 1000, events: { everyMs: -1 } } }).stop();
  });

  it("the leader's other housekeeping runs at most once a second too: vacuum, endpoint health, the attempt log's retention", async () => {
    // They took 1 ms: a vacuum.intervalMs of 1 had the leader VACUUM rea's tables about 2,400
    // times a second where autovacuum is off (and an intervalMs: 60 meant as 60 s, every 60 ms).
    const { createBus } = await import('../src/index.js');
    for (const [options, field, problem] of [
      [{ vacuum: { intervalMs: 1 } }, 'createBus.vacuum.intervalMs', 'at least 1000 ms (1 s): the leader runs this pass every interval, and more often has no use'],
      [{ vacuum: { mode: 'always', intervalMs: 999 } }, 'createBus.vacuum.intervalMs', 'at least 1000 ms (1 s): the leader runs this pass every interval, and more often has no use'],
      [{ webhooks: { healthIntervalMs: 20 } }, 'createBus.webhooks.healthIntervalMs', 'at least 1000 ms (1 s): the leader runs this pass every interval, and more often has no use'],
      [{ webhooks: { attemptRetentionIntervalMs: 1 } }, 'createBus.webhooks.attemptRetentionIntervalMs', 'at least 1000 ms (1 s), as every retention interval: a pass deletes batch after batch until one comes back short'],
    ] as const) {
      expect(() => createBus({ database: { pglite: 'memory://' }, events, ...options } as never)).toThrow(new OptionsError(field, problem));
    }
    await createBus({ database: { pglite: 'memory://' }, events, vacuum: { intervalMs: 1000 }, webhooks: { healthIntervalMs: 1000, attemptRetentionIntervalMs: 1000 } }).stop();
  });
});

describeTargets('retention on $name', (target) => {
  const test = it.skipIf(!target.available);

  test('events: fanned rows go after 7 days; unfanned, poisoned and still-awaited rows stay however old', async () => {
    const clock = new ManualClock();
    const bus = await testBus(target, events, { clock, ...quiet });
    const s = bus.schema;
    const fanned = await record(bus, 3);
    await bus.relayOnce();
    const unfanned = await record(bus, 2);
    const [poisoned] = await record(bus, 1);
    await target.query(`update "${s}".events set poisoned_at = now(), fan_attempts = 5 where id = $1`, [poisoned]);
    // A fanned event whose job is still waiting (a long retry schedule) must keep its event.
    const [awaited] = await record(bus, 1, 'order.created');
    await target.query(`update "${s}".events set fanned_out_at = now() where id = $1`, [awaited]);
    await target.query(`insert into "${s}".jobs (event_id, kind, target, max_attempts, lease_ms, state) values ($1, 'handler', 'slow', 5, 1000, 'retryable')`, [awaited]);

    clock.advance(6 * DAY);
    expect((await bus.retention.run()).rules.find((r) => r.rule === 'events')).toMatchObject({ removed: 0, olderThanMs: 7 * DAY });

    clock.advance(2 * DAY);
    const report = await bus.retention.run();
    expect(report.rules.find((r) => r.rule === 'events')).toMatchObject({ removed: 3, batches: 1, archived: false });
    const left = await ids(target, s);
    expect(left.sort()).toEqual([...unfanned, poisoned, awaited].sort());

    // A year later the backlog is still there: it is never retention's to delete.
    clock.advance(365 * DAY);
    await bus.retention.run();
    expect((await ids(target, s)).sort()).toEqual([...unfanned, poisoned, awaited].sort());
    expect(fanned.every((id) => !left.includes(id))).toBe(true);
  });

  test('an event whose job was discarded stays while that job is kept, so retrying the dead letter still finds it', async () => {
    const clock = new ManualClock();
    const bus = await testBus(target, events, { clock, ...quiet });
    const s = bus.schema;
    const [eventId] = await record(bus, 1);
    await bus.relayOnce();
    // Discarded six days after its event (a webhook's 18 attempts take about four).
    clock.advance(6 * DAY);
    const [{ id: jobId }] = await target.query(
      `insert into "${s}".jobs (event_id, kind, target, max_attempts, lease_ms, state, attempt, finalized_at) values ($1, 'handler', 'fixed-later', 5, 1000, 'discarded', 5, $2) returning id::text as id`,
      [eventId, clock.now()],
    );
    clock.advance(2 * DAY);
    expect((await bus.retention.run()).rules.find((r) => r.rule === 'events')!.removed).toBe(0);
    expect(await bus.jobs.retry([jobId])).toEqual([jobId]);

    // Once the jobs rule has removed the discarded job (7 days after it ended), the event goes too.
    await target.query(`update "${s}".jobs set state = 'discarded', finalized_at = $2 where id = $1`, [jobId, clock.now()]);
    clock.advance(7 * DAY + 1);
    const report = await bus.retention.run();
    // The events rule runs before the jobs rules in a pass: it sees the job one pass later.
    expect(report.rules.find((r) => r.rule === 'jobs.discarded')!.removed).toBe(1);
    expect((await bus.retention.run()).rules.find((r) => r.rule === 'events')!.removed).toBe(1);
    expect(await ids(target, s)).toEqual([]);
  });

  // Two sessions at once: PGlite is one connection.
  it.skipIf(!target.available || target.name !== 'postgres')('a replay made while a pass deletes its event is refused or keeps the event: no delivery is left without it', async () => {
    // The pass decided from a snapshot taken before its locks: a delivery made and committed in
    // between was left waiting for an event it had deleted.
    const clock = new ManualClock();
    const bus = await testBus(target, events, { clock, ...quiet, webhooks: { allowPrivateNetworks: true } });
    const s = bus.schema;
    const ep = await bus.endpoints.create({ url: 'http://127.0.0.1:9/hook', eventTypes: ['note.*'] });
    const [eventId] = await record(bus, 1);
    await bus.relayOnce();
    await target.query(`update "${s}".jobs set state = 'completed', finalized_at = $1`, [clock.now()]);
    clock.advance(8 * DAY);
    // Holds the pass inside its delete, as a large batch would.
    await target.query(`create function "${s}".slow_delete() returns trigger language plpgsql as $$ begin perform pg_sleep(0.5); return old; end $$`);
    await target.query(`create trigger slow before delete on "${s}".events for each row execute function "${s}".slow_delete()`);
    const pass = bus.retention.run();
    await vi.waitFor(async () => {
      const sleeping = await target.query(`select 1 from pg_stat_activity where wait_event = 'PgSleep' and query like '%delete from "${s}".events%'`);
      expect(sleeping).toHaveLength(1);
    }, { timeout: 5000, interval: 20 });
    const replay = await bus.events.replay(eventId!, { endpointId: ep.id }).then(() => 'replayed', (e: Error) => e.name);
    expect((await pass).rules.find((r) => r.rule === 'events')!.removed).toBe(1);
    const orphans = await target.query(
      `select j.id from "${s}".jobs j where j.state in ('available', 'retryable', 'running') and not exists (select 1 from "${s}".events e where e.id = j.event_id)`);
    expect(orphans).toEqual([]);
    expect(replay).toBe('NotFoundError'); // it waited for the pass, then found no event
  });

  test('archive mode moves fanned events to events_archive, whose own window then deletes them', async () => {
    const clock = new ManualClock();
    const bus = await testBus(target, events, { clock, ...quiet, retention: { events: { archive: true, archiveOlderThanMs: 30 * DAY } } });
    const s = bus.schema;
    const moved = await record(bus, 4);
    // As record() stores the OpenTelemetry span that recorded an event.
    await target.query(`update "${s}".events set span_id = '0123456789abcdef', trace_flags = 1 where id = $1`, [moved[0]]);
    await bus.relayOnce();
    clock.advance(8 * DAY);
    const report = await bus.retention.run();
    expect(report.rules.find((r) => r.rule === 'events')).toMatchObject({ removed: 4, archived: true });
    expect(await ids(target, s)).toEqual([]);
    expect(await ids(target, s, 'events_archive')).toEqual(moved);
    const [row] = await target.query(`select type, payload, fanned_out_at is not null as fanned, archived_at, span_id, trace_flags from "${s}".events_archive order by id limit 1`);
    expect(row).toMatchObject({ type: 'note.saved', payload: { n: 0 }, fanned: true, span_id: '0123456789abcdef', trace_flags: 1 });
    expect(new Date(row.archived_at).getTime()).toBe(clock.now().getTime());

    clock.advance(29 * DAY);
    expect((await bus.retention.run()).rules.find((r) => r.rule === 'events_archive')!.removed).toBe(0);
    clock.advance(2 * DAY);
    expect((await bus.retention.run()).rules.find((r) => r.rule === 'events_archive')!.removed).toBe(4);
    expect(await ids(target, s, 'events_archive')).toEqual([]);
  });

  test('jobs: completed after 24 h, discarded and cancelled after 7 days, waiting and running never', async () => {
    const clock = new ManualClock();
    const bus = await testBus(target, events, { clock, ...quiet });
    const s = bus.schema;
    const [eventId] = await record(bus, 1);
    const states = ['available', 'retryable', 'running', 'completed', 'completed', 'discarded', 'cancelled'];
    for (const state of states) {
      await target.query(
        `insert into "${s}".jobs (event_id, kind, target, max_attempts, lease_ms, state, finalized_at)
         values ($1, 'handler', 'h', 5, 1000, $2, case when $2 in ('completed', 'discarded', 'cancelled') then $3::timestamptz end)`,
        [eventId, state, clock.now()]);
    }
    const left = async () => (await target.query<{ state: string }>(`select state from "${s}".jobs order by id`)).map((r) => r.state);

    clock.advance(23 * HOUR);
    await bus.retention.run();
    expect(await left()).toEqual(states);

    clock.advance(2 * HOUR);
    const r = await bus.retention.run();
    expect(r.rules.find((x) => x.rule === 'jobs.completed')!.removed).toBe(2);
    expect(await left()).toEqual(['available', 'retryable', 'running', 'discarded', 'cancelled']);

    clock.advance(7 * DAY);
    const r2 = await bus.retention.run();
    expect(r2.rules.filter((x) => x.rule.startsWith('jobs.')).map((x) => [x.rule, x.removed])).toEqual([
      ['jobs.completed', 0], ['jobs.discarded', 1], ['jobs.cancelled', 1],
    ]);
    expect(await left()).toEqual(['available', 'retryable', 'running']);
  });

  test('deletes run in bounded batches (observed through retention:batch), and -1 keeps forever', async () => {
    const clock = new ManualClock();
    const bus = await testBus(target, events, { clock, ...quiet, retention: { batchSize: 10, pauseMs: 0, jobs: { completedMs: -1 } } });
    const s = bus.schema;
    const [eventId] = await record(bus, 25);
    await bus.relayOnce();
    await target.query(
      `insert into "${s}".jobs (event_id, kind, target, max_attempts, lease_ms, state, finalized_at)
       select $1, 'handler', 'h', 5, 1000, 'completed', $2::timestamptz from generate_series(1, 12)`, [eventId, clock.now()]);
    const batches: { rule: string; removed: number; batch: number }[] = [];
    bus.lifecycle.on('retention:batch', (b) => batches.push(b));

    clock.advance(400 * DAY);
    const report = await bus.retention.run();
    expect(batches.filter((b) => b.rule === 'events').map((b) => b.removed)).toEqual([10, 10, 5]);
    expect(report.rules.find((r) => r.rule === 'events')).toMatchObject({ removed: 25, batches: 3 });
    // completedMs: -1: kept, and no statement ran for it.
    expect(report.rules.find((r) => r.rule === 'jobs.completed')).toMatchObject({ olderThanMs: -1, removed: 0, batches: 0 });
    expect(batches.some((b) => b.rule === 'jobs.completed')).toBe(false);
    expect((await target.query(`select count(*)::int as n from "${s}".jobs`))[0].n).toBe(12);
  });

  test('a dry run reports what each rule would remove and deletes nothing', async () => {
    const clock = new ManualClock();
    const bus = await testBus(target, events, { clock, ...quiet });
    const s = bus.schema;
    const [eventId] = await record(bus, 5);
    await bus.relayOnce();
    await target.query(
      `insert into "${s}".jobs (event_id, kind, target, max_attempts, lease_ms, state, finalized_at)
       values ($1, 'handler', 'h', 5, 1000, 'completed', $2), ($1, 'handler', 'h', 5, 1000, 'discarded', $2)`, [eventId, clock.now()]);
    clock.advance(8 * DAY);
    // A misspelt dryRun was a real pass: what the caller meant to count was deleted.
    await expect(bus.retention.run({ dryrun: true } as never)).rejects.toThrow('retention.run(options): unknown option(s) dryrun (known: dryRun)');
    expect((await ids(target, s)).length).toBe(5);
    const dry = await bus.retention.run({ dryRun: true });
    expect(dry.dryRun).toBe(true);
    // The event with the discarded job stays while that job does (this pass removes the job).
    expect(Object.fromEntries(dry.rules.map((r) => [r.rule, r.removed]))).toMatchObject({ events: 4, 'jobs.completed': 1, 'jobs.discarded': 1 });
    expect(dry.removed).toBe(dry.rules.reduce((n, r) => n + r.removed, 0));
    expect((await target.query(`select count(*)::int as n from "${s}".jobs`))[0].n).toBe(2);
    expect((await ids(target, s)).length).toBe(5);
    const real = await bus.retention.run();
    expect(real.rules.map((r) => [r.rule, r.removed])).toEqual(dry.rules.map((r) => [r.rule, r.removed]));
  });

  test('consume records: the auto window is 2 × the longest handler schedule + the discarded window', async () => {
    const clock = new ManualClock();
    const bus = await testBus(target, events, { clock, ...quiet });
    const s = bus.schema;
    const backoff = exponentialBackoff({ baseMs: 60_000, factor: 1, jitterMs: 0 });
    bus.on('note.saved', 'indexer', () => {}, { maxAttempts: 3, timeoutMs: 10_000, backoff });
    bus.on('note.saved', 'quick', () => {}, { maxAttempts: 1, timeoutMs: 1000 });
    // A handler only another process registered: known by its row, assumed to use the default backoff.
    await bus.driver.executor.handlerUpsertMany([{ name: 'remote', patterns: ['order.created'], coalesceSubject: false, maxAttempts: 1, leaseMs: 1000, priority: 0 }]);
    const eventIds = await record(bus, 3);
    for (const id of eventIds) await target.query(`insert into "${s}".consumes (event_id, handler) values ($1, 'indexer')`, [id]);

    // indexer: 3 leases of (10 s + 5 s margin) + 2 backoffs of 60 s = 165 s.
    const schedule = 3 * 15_000 + 2 * 60_000;
    const windowMs = 2 * schedule + 7 * DAY;
    clock.advance(windowMs - 60_000);
    const before = await bus.retention.run();
    expect(before.rules.find((r) => r.rule === 'consumes')).toMatchObject({ olderThanMs: windowMs, removed: 0 });
    clock.advance(120_000);
    expect((await bus.retention.run()).rules.find((r) => r.rule === 'consumes')!.removed).toBe(3);
    expect((await target.query(`select count(*)::int as n from "${s}".consumes`))[0].n).toBe(0);
  });

  test('consume records are trimmed whatever a handler\'s backoff gives: fractions, years, a throw', async () => {
    const clock = new ManualClock();
    const bus = await testBus(target, events, { clock, ...quiet });
    const s = bus.schema;
    bus.on('note.saved', 'fraction', () => {}, { maxAttempts: 3, transactional: true, backoff: (n) => 1000 * Math.E ** n });
    bus.on('note.saved', 'steep', () => {}, { maxAttempts: 3, transactional: true, backoff: (n) => 1000 * 10 ** (n * 10) });
    bus.on('note.saved', 'buggy', () => {}, { maxAttempts: 3, transactional: true, backoff: () => { throw new Error('bug'); } });
    const [id] = await record(bus, 1);
    await target.query(`insert into "${s}".consumes (event_id, handler) values ($1, 'fraction')`, [id]);
    // steep: 3 leases of (30 s + 5 s) + 2 backoffs cut at a year each (as the worker waits them).
    const windowMs = 2 * (3 * 35_000 + 2 * 365 * DAY) + 7 * DAY;
    const first = (await bus.retention.run()).rules.find((r) => r.rule === 'consumes');
    expect(first).toMatchObject({ olderThanMs: windowMs, removed: 0 });
    clock.advance(windowMs + 1000);
    expect((await bus.retention.run()).rules.find((r) => r.rule === 'consumes')!.removed).toBe(1);
  });

  test('retention.register trims an application table by its time column; names and types are checked', async () => {
    const clock = new ManualClock();
    const bus = await testBus(target, events, { clock, ...quiet, retention: { batchSize: 2, pauseMs: 0 } });
    const app = `${bus.schema}_app`;
    onTestFinished(async () => {
      await target.query(`drop schema if exists "${app}" cascade`);
    });
    await target.query(`create schema "${app}"`);
    await target.query(`create table "${app}".visits (path text, seen_at timestamptz not null)`);
    await target.query(`create table "${app}"."Daily" (day date not null)`);
    await target.query(`insert into "${app}".visits values ('/old', $1::timestamptz - interval '3 days'), ('/old2', $1::timestamptz - interval '2 days'), ('/older', $1::timestamptz - interval '10 days'), ('/new', $1)`, [clock.now()]);
    await target.query(`insert into "${app}"."Daily" values (current_date - 40), (current_date)`);

    bus.retention.register({ table: `${app}.visits`, timeColumn: 'seen_at', olderThan: '24h', every: '1h' });
    bus.retention.register({ table: `${app}.Daily`, timeColumn: 'day', olderThan: '30d' });
    expect(() => bus.retention.register({ table: `${app}.visits`, timeColumn: 'seen_at', olderThan: '1d' })).toThrow(/registered already/);
    expect(() => bus.retention.register({ table: 'visits; drop table x', timeColumn: 'seen_at', olderThan: '1d' })).toThrow(OptionsError);
    expect(() => bus.retention.register({ table: 'a.b.c', timeColumn: 'seen_at', olderThan: '1d' })).toThrow(/more than one/);
    expect(() => bus.retention.register({ table: `${bus.schema}.events`, timeColumn: 'created_at', olderThan: '1d' })).toThrow(/own tables/);
    expect(() => bus.retention.register({ table: 'visits2', timeColumn: 'seen at', olderThan: '1d' })).toThrow(/timeColumn/);

    const batches: number[] = [];
    bus.lifecycle.on('retention:batch', (b) => b.rule === `app:${app}.visits` && batches.push(b.removed));
    const dry = await bus.retention.run({ dryRun: true });
    expect(dry.rules.find((r) => r.rule === `app:${app}.visits`)).toMatchObject({ removed: 3, olderThanMs: DAY, table: `${app}.visits` });
    const report = await bus.retention.run();
    expect(report.rules.find((r) => r.rule === `app:${app}.visits`)).toMatchObject({ removed: 3, batches: 2 });
    expect(batches).toEqual([2, 1]);
    expect((await target.query(`select path from "${app}".visits`)).map((r: any) => r.path)).toEqual(['/new']);
    expect(report.rules.find((r) => r.rule === `app:${app}.Daily`)!.removed).toBe(1);
  });

  test('a registered table whose column is missing or not a time fails the pass with a named field', async () => {
    const missing = await testBus(target, events, quiet);
    const app = `${missing.schema}_app`;
    onTestFinished(async () => {
      await target.query(`drop schema if exists "${app}" cascade`);
    });
    await target.query(`create schema "${app}"; create table "${app}".t (n int, at timestamptz)`);
    missing.retention.register({ table: `${app}.t`, timeColumn: 'nope', olderThan: '1d' });
    await expect(missing.retention.run()).rejects.toThrow(/retention\.register\(.*\.t\)\.timeColumn.*has no column nope/);
    const wrongType = await testBus(target, events, quiet);
    wrongType.retention.register({ table: `${app}.t`, timeColumn: 'n', olderThan: '1d' });
    await expect(wrongType.retention.run()).rejects.toThrow(/n is integer; it must be timestamp/);
  });

  test('a partitioned table, or one with inheritance children, is refused by name and none of its rows go', async () => {
    // A ctid names a row within one table only: deleting old rows by ctid through the parent also
    // deleted fresh rows at the same place in its other partitions.
    const clock = new ManualClock();
    const app = `${(await testBus(target, events, quiet)).schema}_parts`;
    onTestFinished(async () => {
      await target.query(`drop schema if exists "${app}" cascade`);
    });
    await target.query(`create schema "${app}";
      create table "${app}".visits (region text not null, at timestamptz not null) partition by list (region);
      create table "${app}".visits_eu partition of "${app}".visits for values in ('eu');
      create table "${app}".visits_us partition of "${app}".visits for values in ('us');
      create table "${app}".logs (at timestamptz not null);
      create table "${app}".logs_2026 () inherits ("${app}".logs)`);
    const now = clock.now().getTime();
    const old = new Date(now - 40 * DAY).toISOString();
    const fresh = new Date(now).toISOString();
    await target.query(`insert into "${app}".visits values ('eu', '${old}'), ('eu', '${old}'), ('us', '${fresh}'), ('us', '${fresh}')`);
    await target.query(`insert into "${app}".logs values ('${old}'); insert into "${app}".logs_2026 values ('${fresh}')`);

    for (const table of ['visits', 'logs']) {
      const bus = await testBus(target, events, { clock, ...quiet });
      bus.retention.register({ table: `${app}.${table}`, timeColumn: 'at', olderThan: '30d' });
      await expect(bus.retention.run()).rejects.toThrow(
        new RegExp(`retention\\.register\\(${app}\\.${table}\\)\\.table: ${app}\\.${table} is partitioned or has inheritance children`),
      );
    }
    expect((await target.query<{ n: number }>(`select count(*)::int as n from "${app}".visits`))[0]!.n).toBe(4);
    expect((await target.query<{ n: number }>(`select count(*)::int as n from "${app}".logs`))[0]!.n).toBe(2);

    // Each partition on its own is a plain table: its old rows go, the other partition's stay.
    const bus = await testBus(target, events, { clock, ...quiet });
    bus.retention.register({ table: `${app}.visits_eu`, timeColumn: 'at', olderThan: '30d' });
    bus.retention.register({ table: `${app}.visits_us`, timeColumn: 'at', olderThan: '30d' });
    const report = await bus.retention.run();
    expect(report.rules.filter((r) => r.rule.startsWith('app:')).map((r) => [r.rule, r.removed])).toEqual([
      [`app:${app}.visits_eu`, 2], [`app:${app}.visits_us`, 0],
    ]);
    expect((await target.query<{ region: string }>(`select region from "${app}".visits order by region`)).map((r) => r.region)).toEqual(['us', 'us']);
  });

  test("an unqualified name that the search_path resolves to one of rea's tables is refused on the first pass, and none of its rows go", async () => {
    // register() refuses `<schema>.events` by name; `events` alone reached the database, resolved
    // to rea's own table where rea's schema is on the search_path, and deleted the backlog.
    const clock = new ManualClock();
    const schema = freshSchema();
    let database = target.database();
    if (target.name === 'pglite') {
      await target.query(`set search_path to "${schema}", public`);
      onTestFinished(async () => {
        await target.query('reset search_path');
      });
    } else {
      database = { ...database, postgres: `${PG_URL}?options=${encodeURIComponent(`-c search_path="${schema}",public`)}` } as typeof database;
    }
    const bus = await testBus(target, events, { clock, ...quiet, schema, database });
    await record(bus, 3);
    expect(await ids(target, schema)).toHaveLength(3);
    bus.retention.register({ table: 'events', timeColumn: 'created_at', olderThan: '1d' });
    clock.advance(2 * DAY);
    await expect(bus.retention.run()).rejects.toThrow(new RegExp(`retention\\.register\\(events\\)\\.table: events resolves to ${schema}\\.events, one of rea's own tables`));
    expect(await ids(target, schema)).toHaveLength(3);
  });

  test('a registered table that does not exist fails the pass naming the table', async () => {
    const bus = await testBus(target, events, quiet);
    bus.retention.register({ table: `${bus.schema}_none.t`, timeColumn: 'at', olderThan: '1d' });
    await expect(bus.retention.run()).rejects.toThrow(/retention\.register\(.*_none\.t\)\.table: table .*_none\.t does not exist/);
  });

  test('the leader runs the rules by itself; register after start is refused', async () => {
    const clock = new ManualClock();
    const bus = await testBus(target, events, { clock, relay: { enabled: false } });
    await record(bus, 2);
    await bus.relayOnce();
    clock.advance(8 * DAY);
    const pass = bus.lifecycle.waitFor('retention:pass', (p) => p.rule === 'events');
    await bus.start();
    expect((await pass).removed).toBe(2);
    expect(bus.isLeader).toBe(true);
    expect(() => bus.retention.register({ table: 'x', timeColumn: 'at', olderThan: '1d' })).toThrow(/before bus.start/);
  });
});
