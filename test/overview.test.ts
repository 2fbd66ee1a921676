// bus.overview() against known table contents: exact counts, estimates past the exact limit
// (and marked), table sizes, and alerts that fire and clear after the fix, with an injected clock.
import { expect, it } from 'vitest';
import { z } from 'zod';
import { defineEvents, ManualClock } from '../src/index.js';
import { AdminMetrics } from '../src/admin/metrics.js';
import { describeTargets, testBus, type Target } from './helpers/db.js';

const events = defineEvents({ 'note.saved': z.object({ n: z.number() }) });
const quiet = { relay: { enabled: false }, worker: { enabled: false }, retention: { enabled: false } } as const;

async function record(bus: any, n: number): Promise<string[]> {
  return bus.transaction((tx: unknown) => bus.recordMany(tx, Array.from({ length: n }, (_, i) => ({ type: 'note.saved', payload: { n: i } }))));
}

async function addJobs(target: Target, schema: string, eventId: string, counts: Record<string, number>, finalizedAt: Date, handler = 'h') {
  for (const [state, n] of Object.entries(counts)) {
    await target.query(
      `insert into "${schema}".jobs (event_id, kind, target, max_attempts, lease_ms, state, finalized_at, lease_expires_at)
       select $1, 'handler', $5, 5, 1000, $2,
              case when $2 in ('completed', 'discarded', 'cancelled') then $3::timestamptz end,
              case when $2 = 'running' then $3::timestamptz + interval '1 hour' end
       from generate_series(1, $4::int)`, [eventId, state, finalizedAt, n, handler]);
  }
}

describeTargets('overview on $name', (target) => {
  const test = it.skipIf(!target.available);

  test('figures match the tables: backlog, poisoned, oldest age, jobs by state, discarded, sizes', async () => {
    const clock = new ManualClock();
    const bus = await testBus(target, events, { clock, ...quiet, alerts: { eventsBacklog: -1, eventsBacklogAgeMs: -1, eventsPoisoned: -1, jobsDiscarded: -1 } });
    const s = bus.schema;
    const fanned = await record(bus, 4);
    await bus.relayOnce();
    const unfanned = await record(bus, 3);
    await target.query(`update "${s}".events set poisoned_at = now() where id = any($1::uuid[])`, [unfanned.slice(1)]);
    await addJobs(target, s, fanned[0]!, { available: 2, retryable: 1, running: 1, completed: 4, discarded: 2, cancelled: 1 }, clock.now());
    const [{ created_at: oldest }] = await target.query(`select created_at from "${s}".events where id = $1`, [unfanned[0]]);

    clock.set(new Date(oldest).getTime() + 42_000);
    const o = await bus.overview();
    expect(o).toMatchObject({
      backlog: 1,
      poisoned: 2,
      oldestUnfannedAgeMs: 42_000,
      jobs: { available: 2, retryable: 1, running: 1, completed: 4, discarded: 2, cancelled: 1 },
      discarded: 2,
      estimated: [],
      alerts: [],
    });
    expect(o.oldestUnfannedAt).toEqual(new Date(oldest));
    expect(o.at).toEqual(clock.now());
    const names = o.tables.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining(['consumes', 'events', 'events_archive', 'handlers', 'jobs', 'leader', 'migrations']));
    // pg_total_relation_size: heap + indexes + TOAST, so even a small table with indexes has pages.
    const size = Object.fromEntries(o.tables.map((t) => [t.name, t.totalBytes]));
    expect(size.events).toBeGreaterThanOrEqual(3 * 8192);
    expect(size.jobs).toBeGreaterThan(0);
  });

  test('past the exact limit a count becomes a planner estimate, and says so', async () => {
    const bus = await testBus(target, events, { ...quiet, overview: { exactCountLimit: 5 } });
    const s = bus.schema;
    const [eventId] = await record(bus, 1);
    await addJobs(target, s, eventId!, { completed: 40, discarded: 2 }, new Date());
    await target.query(`analyze "${s}".jobs`);
    const o = await bus.overview();
    expect(o.estimated).toEqual(['jobs.completed']);
    // Never below what was counted, and near the truth once the table is analyzed.
    expect(o.jobs.completed).toBeGreaterThanOrEqual(6);
    expect(o.jobs.completed).toBeGreaterThan(20);
    expect(o.jobs.completed).toBeLessThan(80);
    expect(o.discarded).toBe(2);
    // And /metrics says which figures are estimates (a stale one read 10001 for 454,000 waiting).
    const text = await new AdminMetrics(bus, false).render();
    expect(text).toContain('rea_count_estimated{figure="jobs.completed"} 1');
    expect(text).toContain('rea_count_estimated{figure="jobs.discarded"} 0');
    expect(text).toContain('rea_count_estimated{figure="backlog"} 0');
  });

  test('where the backlog crossed its threshold is looked for only within the exact limit; above it the count alert has no since', async () => {
    const bus = await testBus(target, events, { ...quiet, overview: { exactCountLimit: 5 }, alerts: { eventsBacklog: 7 } });
    // One transaction each, so each has its own created_at.
    for (let i = 0; i < 10; i++) await record(bus, 1);
    const created = (await target.query(`select created_at from "${bus.schema}".events order by id`)).map((r: any) => new Date(r.created_at));
    const facts = (backlogThreshold: number) => bus.driver.operations.overviewFacts({ exactLimit: 5, backlogThreshold, handlerUnattendedMs: -1, jobsWaitingMs: -1 });
    expect((await facts(4)).backlogCrossedAt).toEqual(created[4]);
    expect((await facts(5)).backlogCrossedAt).toEqual(created[5]);
    // Found, it took an OFFSET walk of threshold entries, however large the threshold was set.
    expect((await facts(7)).backlogCrossedAt).toBeNull();
    expect((await facts(-1)).backlogCrossedAt).toBeNull();
    // Past the exact limit the count is the planner's (analyzed: 10), and the alert has no since.
    await target.query(`analyze "${bus.schema}".events`);
    const [alert] = (await bus.overview()).alerts;
    expect(alert).toMatchObject({ name: 'events_backlog', threshold: 7, unit: 'events', since: null, estimated: true });
  });

  test("jobs_waiting: a queue's next due job that no worker has taken for longer than the threshold, for handlers and webhook deliveries", async () => {
    // Workers falling behind raised nothing: 454,000 jobs waited, and the overview said "alerts none".
    const bus = await testBus(target, events, quiet);
    const s = bus.schema;
    const handler = (name: string) => ({ name, patterns: ['note.saved'], coalesceSubject: false, maxAttempts: 5, leaseMs: 1000, priority: 0 });
    await bus.driver.executor.handlerUpsertMany([handler('slow'), handler('fast')]);
    const [eventId] = await record(bus, 1);
    const add = (kind: string, name: string, state: string, due: string) => target.query(
      `insert into "${s}".jobs (event_id, kind, target, max_attempts, lease_ms, state, scheduled_at)
       values ($1, $2, $3, 5, 1000, $4, now() + $5::interval)`, [eventId, kind, name, state, due]);
    await add('handler', 'slow', 'available', '-10 minutes'); // its next job in claim order
    await add('handler', 'slow', 'retryable', '1 hour'); // not due yet: never counted
    await add('handler', 'fast', 'available', '-1 minute'); // due, within the threshold
    await add('webhook', '0190d6f6-0000-7000-8000-000000000001', 'retryable', '-8 minutes');
    await add('webhook', '0190d6f6-0000-7000-8000-000000000002', 'available', '2 hours');

    const [alert, ...rest] = (await bus.overview()).alerts;
    expect(rest).toEqual([]);
    expect(alert).toMatchObject({ name: 'jobs_waiting', threshold: 5 * 60_000, unit: 'ms', estimated: false });
    expect(alert!.figure).toBeGreaterThanOrEqual(10 * 60_000 - 1000);
    expect(alert!.figure).toBeLessThan(11 * 60_000);
    expect(alert!.message).toMatch(/^2 queues have jobs due and not taken, the longest for 10 min \(handler 'slow', webhook deliveries\)/);

    // A worker takes them: nothing due is left untaken.
    await target.query(`update "${s}".jobs set state = 'running', lease_expires_at = now() + interval '1 hour' where scheduled_at < now() - interval '5 minutes'`);
    expect((await bus.overview()).alerts).toEqual([]);
    // Off with -1.
    await add('handler', 'slow', 'available', '-10 minutes');
    const off = await testBus(target, events, { ...quiet, schema: s, alerts: { jobsWaitingMs: -1 } } as never);
    expect((await off.overview()).alerts).toEqual([]);
    expect((await bus.overview()).alerts.map((a) => a.name)).toEqual(['jobs_waiting']);
  });

  test('alerts fire past their thresholds with their since, and clear after the fix', async () => {
    const clock = new ManualClock();
    const bus = await testBus(target, events, { clock, ...quiet, alerts: { eventsBacklog: 2 } });
    const s = bus.schema;
    bus.on('note.saved', 'h', () => {});
    await bus.driver.executor.handlerUpsertMany([{ name: 'h', patterns: ['note.saved'], coalesceSubject: false, maxAttempts: 5, leaseMs: 1000, priority: 0 }]);
    // One transaction each, so each has its own created_at.
    const backlog = [...await record(bus, 1), ...await record(bus, 1), ...await record(bus, 1)];
    const [poisoned] = await record(bus, 1);
    clock.set(Date.now() + 1000);
    const poisonedAt = new Date(clock.now().getTime() - 30_000);
    await target.query(`update "${s}".events set poisoned_at = $2, fan_attempts = 5 where id = $1`, [poisoned, poisonedAt]);
    const discardedAt = new Date(clock.now().getTime() - 60_000);
    // Of another handler than h: the relay gives h a job for this event below, and a dead letter
    // of h for it would then not be retried beside that one.
    await addJobs(target, s, backlog[0]!, { discarded: 1 }, discardedAt, 'other');
    const created = (await target.query(`select created_at from "${s}".events order by id`)).map((r: any) => new Date(r.created_at));

    const o = await bus.overview();
    expect(o.alerts.map((a) => a.name)).toEqual(['events_backlog', 'events_poisoned', 'jobs_discarded']);
    // The 3rd oldest unfanned event is the one that took the backlog past 2.
    expect(o.alerts[0]).toMatchObject({ figure: 3, threshold: 2, unit: 'events', since: created[2] });
    expect(o.alerts[1]).toMatchObject({ figure: 1, threshold: 0, since: poisonedAt });
    expect(o.alerts[2]).toMatchObject({ figure: 1, threshold: 0, since: discardedAt });

    // Backlog by age: the relay is still behind 6 minutes later.
    clock.set(created[0]!.getTime() + 6 * 60_000);
    const aged = (await bus.overview()).alerts[0]!;
    expect(aged).toMatchObject({ name: 'events_backlog', since: created[2] });
    expect(new Date(aged.since!).getTime()).toBeLessThanOrEqual(created[0]!.getTime() + 5 * 60_000);

    // The fixes: the relay catches up, the poisoned event is requeued and fanned, the job retried.
    await bus.relayOnce();
    expect((await bus.overview()).alerts.map((a) => a.name)).toEqual(['events_poisoned', 'jobs_discarded']);
    expect(await bus.events.requeue({ poisoned: true })).toEqual([poisoned]);
    await bus.relayOnce();
    expect(await bus.jobs.retry({ state: 'discarded' })).toHaveLength(1);
    const after = await bus.overview();
    expect(after.alerts).toEqual([]);
    expect(after).toMatchObject({ backlog: 0, poisoned: 0, discarded: 0, oldestUnfannedAgeMs: null });
  });
});
