// Hand-off: the relay inserts the handler jobs its own process's worker has room for already
// claimed by that worker, so they run without a claim statement, but never ahead of an older job
// of the same handler waiting in the queue, and never beyond the room the worker offered.
import { describe, expect, it, onTestFinished } from 'vitest';
import { z } from 'zod';
import { PGliteDriver } from '../src/drivers/pglite/driver.js';
import { PostgresDriver } from '../src/drivers/postgres/driver.js';
import { databaseClock } from '../src/core/clock.js';
import { Lifecycle } from '../src/core/lifecycle.js';
import type { ClaimedJob, Driver, FanOutHandOff } from '../src/driver/types.js';
import { createBus, defineEvents } from '../src/index.js';
import { Relay } from '../src/relay/relay.js';
import { describeTargets, freshSchema, postgresTarget, targets, testBus, type Target } from './helpers/db.js';
import { holdJobsLockWhile } from './helpers/faults.js';
import { counter, deferred } from './helpers/signals.js';

const events = defineEvents({ 'order.created': z.object({ n: z.number() }) });

function driverFor(target: Target, schema: string): Driver {
  const db = target.database() as { postgres?: string; pglite?: never };
  return db.postgres
    ? new PostgresDriver({ connection: db.postgres, schema, poolSize: 4, onError: () => {} })
    : new PGliteDriver({ database: db.pglite!, schema });
}

/** A migrated schema with handlers registered, relay and worker off: the statements are driven by hand. */
async function handSetup(target: Target, handlers: string[]) {
  const schema = freshSchema();
  const driver = driverFor(target, schema);
  const bus = createBus({ database: { driver }, schema, events, relay: { enabled: false }, worker: { enabled: false } });
  for (const h of handlers) bus.on('order.created', h, () => {});
  await bus.migrate();
  await bus.start(); // registers the handler rows the fan-out routes by
  onTestFinished(async () => {
    await bus.stop();
    await target.query(`drop schema if exists "${schema}" cascade`);
  });
  const record = (n: number) => bus.transaction((tx) => bus.record(tx, 'order.created', { n }));
  const fanOut = (limit: number, handOff?: { targets: { target: string; limit: number; leaseMs: number }[]; limit: number }) =>
    driver.executor.eventFanOut(driver, { limit, now: null, handOff: handOff && { workerId: 'worker-w', ...handOff } });
  const jobs = () => target.query<{ event_id: string; target: string; state: string; attempt: number; attempted_by: string | null; leased: boolean; lease_ms: number; leased_for: number | null }>(
    `select event_id::text, target, state, attempt, attempted_by, lease_expires_at is not null as leased, lease_ms,
            (extract(epoch from lease_expires_at - attempted_at) * 1000)::int as leased_for
     from "${schema}".jobs order by id`);
  return { bus, driver, schema, record, fanOut, jobs };
}

describeTargets('hand-off on $name', (target) => {
  const test = it.skipIf(!target.available);

  test('a job for this process\'s idle worker is inserted already claimed by it and runs with no claim', async () => {
    const schema = freshSchema();
    const bus = createBus({ database: target.database(), schema, events, instanceId: 'solo' });
    onTestFinished(async () => {
      await bus.stop();
      await target.query(`drop schema if exists "${schema}" cascade`);
    });
    await bus.migrate();
    const ran = deferred<string>();
    bus.on('order.created', 'ship', (event) => ran.resolve(event.id));
    const handed: string[] = [];
    bus.lifecycle.on('jobs:handed-off', (e) => handed.push(...e.jobIds));
    const fanned: number[] = [];
    bus.lifecycle.on('relay:batch:fanned', (b) => fanned.push(b.handedOff));
    await bus.start();
    const completed = bus.lifecycle.waitFor('job:completed');

    const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { n: 1 }));
    expect(await ran.promise).toBe(id);
    const done = await completed;
    expect(handed).toEqual([done.jobId]);
    expect(fanned).toEqual([1]);
    const [job] = await bus.jobs.forEvent(id);
    expect(job).toMatchObject({ state: 'completed', attempt: 1 });
    const [row] = await target.query(`select attempted_by from "${schema}".jobs where id = $1`, [done.jobId]);
    expect(row.attempted_by).toBe('solo');
  });

  test('handed-off jobs are running, attempt 1, leased to the worker for its own lease; at most the room offered, per handler and in all', async () => {
    const s = await handSetup(target, ['a', 'b']);
    for (let n = 1; n <= 3; n++) await s.record(n);
    const round = await s.fanOut(10, { targets: [{ target: 'a', limit: 1, leaseMs: 1500 }, { target: 'b', limit: 3, leaseMs: 2500 }], limit: 3 });
    expect(round.jobs).toBe(6);
    // Oldest events first, 3 in all: a's first job (its limit is 1), then b's first two.
    expect(round.handedOff.map((j) => [j.target, (j.event.payload as { n: number }).n])).toEqual([['a', 1], ['b', 1], ['b', 2]]);
    for (const j of round.handedOff) expect(j).toMatchObject({ kind: 'handler', attempt: 1, eventFound: true, event: { type: 'order.created' } });
    const rows = await s.jobs();
    expect(rows.filter((r) => r.state === 'running')).toHaveLength(3);
    // The worker's lease, not the handlers row's (handSetup's bus registered 30 s + 5 s for both).
    const lease = { a: 1500, b: 2500 } as Record<string, number>;
    for (const r of rows) {
      if (r.state === 'running') expect(r).toMatchObject({ attempt: 1, attempted_by: 'worker-w', leased: true, lease_ms: lease[r.target], leased_for: lease[r.target] });
      else expect(r).toMatchObject({ state: 'available', attempt: 0, attempted_by: null, leased: false, lease_ms: 35_000 });
    }
  });

  test('with room for fewer than the round\'s jobs, the higher-priority handler\'s are handed off first', async () => {
    // The room in all went by event, then handler name: 'a-low' (priority 10) took the one slot
    // and ran before 'b-high' (priority -10), which waited in the queue.
    const schema = freshSchema();
    const driver = driverFor(target, schema);
    const bus = createBus({ database: { driver }, schema, events, relay: { enabled: false }, worker: { enabled: false } });
    bus.on('order.created', 'a-low', () => {}, { priority: 10 });
    bus.on('order.created', 'b-high', () => {}, { priority: -10 });
    await bus.migrate();
    await bus.start();
    onTestFinished(async () => {
      await bus.stop();
      await target.query(`drop schema if exists "${schema}" cascade`);
    });
    await bus.transaction((tx) => bus.record(tx, 'order.created', { n: 1 }));
    await bus.transaction((tx) => bus.record(tx, 'order.created', { n: 2 }));
    const room = (target: string) => ({ target, limit: 2, leaseMs: 30_000 });
    await driver.executor.eventFanOut(driver, { limit: 10, now: null, handOff: { workerId: 'worker-w', targets: [room('a-low'), room('b-high')], limit: 2 } });
    const rows = await target.query<{ target: string; state: string }>(`select target, state from "${schema}".jobs order by target, id`);
    expect(rows).toEqual([
      { target: 'a-low', state: 'available' }, { target: 'a-low', state: 'available' },
      { target: 'b-high', state: 'running' }, { target: 'b-high', state: 'running' },
    ]);
  });

  test('nothing is handed off while an older job of that handler waits due in the queue', async () => {
    const s = await handSetup(target, ['a', 'b']);
    await s.record(1);
    await s.fanOut(1); // another process's relay, no worker: a's and b's jobs for event 1 wait
    await s.record(2);
    await s.driver.executor.jobClaim({ workerId: 'other', targets: [{ kind: 'handler', target: 'b', limit: 1, leaseMs: 35_000 }], limit: 1, now: null });
    // Now only a's job for event 1 waits: a gets nothing handed off, b (nothing waiting) does.
    const round = await s.fanOut(10, { targets: [{ target: 'a', limit: 5, leaseMs: 35_000 }, { target: 'b', limit: 5, leaseMs: 35_000 }], limit: 10 });
    expect(round.handedOff.map((j) => j.target)).toEqual(['b']);
    const waitingForA = (await s.jobs()).filter((r) => r.target === 'a').map((r) => r.state);
    expect(waitingForA).toEqual(['available', 'available']);
  });

  test('in a backlog (full rounds that queue jobs) the relay stops offering room until a round is not full', async () => {
    const s = await handSetup(target, ['a']);
    for (let n = 1; n <= 30; n++) await s.record(n);
    let reserved = 0;
    const handed: ClaimedJob[][] = [];
    const worker = {
      reserveHandOff: (): FanOutHandOff => (reserved++, { workerId: 'worker-w', targets: [{ target: 'a', limit: 2, leaseMs: 35_000 }], limit: 2 }),
      acceptHandOff: (_r: FanOutHandOff, jobs: ClaimedJob[]) => void handed.push(jobs),
    };
    const silent = { debug() {}, info() {}, warn() {}, error() {}, child: () => silent };
    const relay = new Relay(s.driver, { batchSize: 10, minPollMs: 1, maxPollMs: 10, maxFanAttempts: 5, concurrency: 1, inlineMs: 0 }, {
      lifecycle: new Lifecycle(), log: silent, clock: databaseClock, onFanned: () => {}, handOff: worker,
    });
    expect(await relay.round()).toBe('full'); // offered room: 2 handed off, 8 queued
    expect(await relay.round()).toBe('full'); // backlog: no room offered
    expect(await relay.round()).toBe('full');
    expect(reserved).toBe(1);
    expect(handed.map((j) => j.length)).toEqual([2]);
    expect(await relay.round()).toBe('none'); // the backlog is fanned out
    await s.record(31);
    expect(await relay.round()).toBe('some'); // room offered again (nothing handed: older jobs of a wait)
    expect(reserved).toBe(2);
    expect(handed.map((j) => j.length)).toEqual([2, 0]);
  });

  test('a handed-off job whose worker died is rescued after its lease and runs once elsewhere', async () => {
    const s = await handSetup(target, ['a']);
    const id = await s.record(1);
    const round = await s.fanOut(10, { targets: [{ target: 'a', limit: 1, leaseMs: 35_000 }], limit: 1 });
    expect(round.handedOff).toHaveLength(1);
    // worker-w never runs it (its process is gone). Past the lease, the rescuer returns it.
    const later = new Date(Date.now() + 10 * 60_000);
    expect(await s.driver.executor.jobRescue({ limit: 10, now: later })).toEqual({ rescued: 1, discarded: 0 });
    const [job] = await s.bus.jobs.forEvent(id);
    expect(job).toMatchObject({ state: 'retryable', attempt: 1 });
    expect(job!.errors[0]!.name).toBe('LeaseExpired');
    const again = await s.driver.executor.jobClaim({ workerId: 'w2', targets: [{ kind: 'handler', target: 'a', limit: 5, leaseMs: 35_000 }], limit: 5, now: later });
    expect(again.map((j) => [j.event.id, j.attempt])).toEqual([[id, 2]]);
  });

  test('a burst with several buses on one database still runs every job exactly once', async () => {
    const schema = freshSchema();
    const seen = new Map<number, number>();
    const all = counter(600);
    const buses = [0, 1, 2].map((i) => createBus({ database: target.database(), schema, events, instanceId: `bus-${i}`, worker: { concurrency: 4 } }));
    onTestFinished(async () => {
      await Promise.all(buses.map((b) => b.stop()));
      await target.query(`drop schema if exists "${schema}" cascade`);
    });
    await buses[0]!.migrate();
    let handed = 0;
    for (const b of buses) {
      b.on('order.created', 'count', (event) => {
        seen.set(event.payload.n, (seen.get(event.payload.n) ?? 0) + 1);
      });
      b.lifecycle.on('job:completed', () => all.tick());
      b.lifecycle.on('jobs:handed-off', (e) => (handed += e.jobIds.length));
      await b.start();
    }
    for (let start = 0; start < 600; start += 50) {
      await buses[start % 3]!.transaction((tx) =>
        buses[start % 3]!.recordMany(tx, Array.from({ length: 50 }, (_, k) => ({ type: 'order.created' as const, payload: { n: start + k } }))));
    }
    await all.done;
    const [{ completed }] = await target.query(`select count(*)::int as completed from "${schema}".jobs where state = 'completed'`);
    expect(completed).toBe(600);
    expect(seen.size).toBe(600);
    expect([...seen.values()].every((v) => v === 1)).toBe(true);
    expect(handed).toBeGreaterThan(0);
  });
});

describe.skipIf(!postgresTarget.available)('hand-off rounds that wait on the server, on postgres', () => {
  it('a job handed off by a round that waited on a lock past half the lease margin goes back to the queue instead of starting on a lease shorter than its timeout', async () => {
    // The round leases what it hands off from its statement's start (now()); the worker dated the
    // jobs from the reply, so a round that waited for a table lock handed over jobs with part of
    // their lease gone, and a handler inside its timeout could outlive the lease.
    const target = postgresTarget;
    const timeoutMs = 500;
    const bus = await testBus(target, events, { worker: { leaseMarginMs: 100 } });
    const s = bus.schema;
    const outlasts: boolean[] = [];
    bus.on('order.created', 'timed', async (_e, ctx) => {
      // The lease must outlast the run's timeout: the worker aborts the run before the rescuer may take it.
      const [row] = await target.query(
        `select lease_expires_at > clock_timestamp() + $2 * interval '1 ms' as outlasts from "${s}".jobs where id = $1`, [ctx.jobId, timeoutMs]);
      outlasts.push(row.outlasts);
    }, { timeoutMs });
    await bus.start();
    const handed = bus.lifecycle.waitFor('jobs:handed-off');
    const done = bus.lifecycle.waitFor('job:completed');
    // The relay's round waits behind the lock, its now() (the lease's start) already fixed, for half the lease.
    await holdJobsLockWhile(target, s, { statementLike: 'with claimed as', names: 'events', holdMs: 300 },
      () => bus.transaction((tx) => bus.record(tx, 'order.created', { n: 1 })));
    await handed;
    await done;
    expect(outlasts).toEqual([true]);
  });
});
