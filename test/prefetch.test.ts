// The worker's prefetch buffer: jobs claimed ahead of free slots start in order, and a job that
// waits too long to start inside its lease goes back to the queue instead of risking a rescue
// while it runs.
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { defineEvents } from '../src/index.js';
import { describeTargets, postgresTarget, testBus } from './helpers/db.js';
import { holdJobsLockWhile } from './helpers/faults.js';
import { counter, deferred } from './helpers/signals.js';

const events = defineEvents({ 'task.queued': z.object({ n: z.number() }) });

describeTargets('prefetch on $name', (target) => {
  it.skipIf(!target.available)('jobs buffered past half the lease margin are released, then run once each', async () => {
    const bus = await testBus(target, events, { worker: { concurrency: 1, prefetch: 50, leaseMarginMs: 200 } });
    const ran = new Map<number, number>();
    const gate = deferred();
    const all = counter(60);
    bus.on('task.queued', 'slow-then-fast', async (e) => {
      ran.set(e.payload.n, (ran.get(e.payload.n) ?? 0) + 1);
      if (e.payload.n === 40) await gate.promise; // hold the only slot while the buffer ages
    });
    bus.lifecycle.on('job:completed', () => all.tick());
    const released: string[] = [];
    bus.lifecycle.on('jobs:released', (r) => {
      released.push(...r.jobIds);
      gate.resolve();
    });
    await bus.transaction((tx) => bus.recordMany(tx, Array.from({ length: 60 }, (_, n) => ({ type: 'task.queued' as const, payload: { n } }))));
    await bus.start();
    await all.done;
    expect(released.length).toBeGreaterThan(0);
    expect([...ran.values()].every((n) => n === 1)).toBe(true);
    expect(ran.size).toBe(60);
    const rows = await target.query(`select state, attempt, count(*)::int as n from "${bus.schema}".jobs group by state, attempt`);
    // A release undoes the claim: no attempt was spent on jobs that never started.
    expect(rows).toEqual([{ state: 'completed', attempt: 1, n: 60 }]);
  });

  it.skipIf(!target.available)('jobs:released names only the jobs the release returned to the queue', async () => {
    // A buffered job whose lease expired may be rescued and claimed again elsewhere before this
    // worker releases it: its release changes no row, and listeners (metrics, logs) must not
    // count it as released.
    const bus = await testBus(target, events, { worker: { concurrency: 2, prefetch: 10 } });
    const s = bus.schema;
    const gate = deferred();
    const started: string[] = [];
    bus.on('task.queued', 'held', async (_e, ctx) => {
      started.push(ctx.jobId);
      await gate.promise;
    });
    const released: string[] = [];
    bus.lifecycle.on('jobs:released', (r) => released.push(...r.jobIds));
    await bus.transaction((tx) => bus.recordMany(tx, Array.from({ length: 6 }, (_, n) => ({ type: 'task.queued' as const, payload: { n } }))));
    await bus.start();
    // Two jobs run, two more wait in the prefetch buffer (before any rate, one round of concurrency ahead).
    await expect.poll(async () => (await target.query(`select count(*)::int as n from "${s}".jobs where state = 'running'`))[0].n).toBe(4);
    await vi.waitFor(() => expect(started).toHaveLength(2));
    const buffered = (await target.query(`select id::text as id from "${s}".jobs where state = 'running' and not (id::text = any($1)) order by id`, [started]))
      .map((r) => r.id as string);
    expect(buffered).toHaveLength(2);
    const [takenId, kept] = buffered;
    // Rescued and claimed by another worker: the same row, running at its next attempt.
    await target.query(`update "${s}".jobs set attempt = attempt + 1, attempted_by = 'other' where id = $1`, [takenId]);
    const stopped = bus.stop({ timeoutMs: 2000 });
    gate.resolve();
    await stopped;
    expect(released).toEqual([kept]);
    const [row] = await target.query(`select state, attempt, attempted_by from "${s}".jobs where id = $1`, [takenId]);
    expect(row).toEqual({ state: 'running', attempt: 2, attempted_by: 'other' });
  });
});

describe.skipIf(!postgresTarget.available)('claims that wait on the server, on postgres', () => {
  it('a job whose claim waited on a lock past half the lease margin goes back to the queue instead of starting on a lease shorter than its timeout', async () => {
    // A claim leases its jobs from the statement's start (now()), but the worker dated them from
    // its reply: a claim that waited for a table lock (a migration's index build, a VACUUM FULL,
    // a LOCK TABLE) started its jobs with part of the lease gone, and a handler still inside its
    // timeout could outlive the lease, so the rescuer gave the job to another run while it ran.
    const target = postgresTarget;
    const timeoutMs = 500;
    const bus = await testBus(target, events, { relay: { handOff: false }, worker: { leaseMarginMs: 100, minPollMs: 5, maxPollMs: 20 } });
    const s = bus.schema;
    const outlasts: boolean[] = [];
    bus.on('task.queued', 'timed', async (_e, ctx) => {
      // The lease must outlast the run's timeout: the worker aborts the run before the rescuer may take it.
      const [row] = await target.query(
        `select lease_expires_at > clock_timestamp() + $2 * interval '1 ms' as outlasts from "${s}".jobs where id = $1`, [ctx.jobId, timeoutMs]);
      outlasts.push(row.outlasts);
    }, { timeoutMs });
    // The subscription as start() stores it, so a round makes the job before the worker runs.
    await bus.driver.executor.handlerUpsertMany([{ name: 'timed', patterns: ['task.queued'], coalesceSubject: false, maxAttempts: 5, leaseMs: timeoutMs + 100, priority: 0 }]);
    await bus.transaction((tx) => bus.record(tx, 'task.queued', { n: 1 }));
    await bus.relayOnce(); // the job waits in the queue: the bus has not started
    const done = bus.lifecycle.waitFor('job:completed');
    // The worker's claim waits behind the lock, its now() (the lease's start) already fixed, for
    // half the lease. start()'s heartbeat may wait for the lock too, so it is awaited afterwards.
    const started = await holdJobsLockWhile(target, s, { statementLike: 'with targets as', names: 'jobs', holdMs: 300 },
      () => ({ started: bus.start() }));
    await started.started;
    await done;
    expect(outlasts).toEqual([true]);
  });
});
