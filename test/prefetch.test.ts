// The worker's prefetch buffer: jobs claimed ahead of free slots start in order, and a job that
// waits too long to start inside its lease goes back to the queue instead of risking a rescue
// while it runs.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineEvents } from '../src/index.js';
import { describeTargets, postgresTarget, testBus } from './helpers/db.js';
import { holdJobsLockWhile, holdNextClaim } from './helpers/faults.js';
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
    // The jobs come by the worker's claims alone (no hand-off), one at a time: a claim in flight
    // as a relay round hands jobs off hands back what no longer fits, and those releases are not
    // this test's (the test after this one). leaseMarginMs 60 s: buffered jobs go stale after
    // 30 s, not 2.5 s, which a loaded machine could take before the stop below.
    const bus = await testBus(target, events, { relay: { handOff: false }, worker: { concurrency: 2, prefetch: 10, leaseMarginMs: 60_000 } });
    const s = bus.schema;
    const gate = deferred();
    const started: string[] = [];
    const twoStarted = counter(2);
    bus.on('task.queued', 'held', async (_e, ctx) => {
      started.push(ctx.jobId);
      twoStarted.tick();
      await gate.promise;
    });
    const released: string[] = [];
    bus.lifecycle.on('jobs:released', (r) => released.push(...r.jobIds));
    await bus.transaction((tx) => bus.recordMany(tx, Array.from({ length: 6 }, (_, n) => ({ type: 'task.queued' as const, payload: { n } }))));
    await bus.start();
    // Two jobs run, two more wait in the prefetch buffer (before any rate, one round of
    // concurrency ahead): one claim took the four, and it was stored before they started.
    await twoStarted.done;
    const running = (await target.query(`select id::text as id from "${s}".jobs where state = 'running' order by id`)).map((r) => r.id as string);
    expect(running).toHaveLength(4);
    const buffered = running.filter((id) => !started.includes(id));
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

  it.skipIf(!target.available)('a claim in flight while a relay round is given the same room for a hand-off hands back what no longer fits, at once', async () => {
    // The worker's claim counted its room and was on its way to the database when a relay round
    // reserved that same room (a claim holds no reservation): the round handed its jobs over, the
    // claim then took jobs the round had queued, and the worker held more than its slots and
    // prefetch allow, out of every other process's reach until they went stale (half the lease
    // margin) or a handler finished. Seen under load in the test above: six jobs held for four.
    // leaseMarginMs 60 s: a job left in the buffer would wait 30 s to go stale, far past this test.
    const bus = await testBus(target, events, { instanceId: 'solo', worker: { concurrency: 1, prefetch: 0, leaseMarginMs: 60_000 } });
    const s = bus.schema;
    const gate = deferred();
    const started = deferred<string>();
    const all = counter(3);
    bus.on('task.queued', 'held', async (_e, ctx) => {
      started.resolve(ctx.jobId);
      await gate.promise;
    });
    bus.lifecycle.on('job:completed', () => all.tick());
    // The worker's next claim is held on its way to the database, after it counted one free slot.
    const { hold, sent, letGo, claimed } = holdNextClaim(bus);
    await bus.start();
    hold();
    await sent;
    await bus.transaction((tx) => bus.recordMany(tx, [1, 2, 3].map((n) => ({ type: 'task.queued' as const, payload: { n } }))));
    // The round handed the worker one job, for its one slot, and queued the other two.
    const handedOff = await started.promise;
    const released = bus.lifecycle.waitFor('jobs:released', () => true, 20_000);
    letGo();
    // The claim took one of the two; with the slot taken, it goes straight back.
    expect((await released).jobIds).toEqual(claimed[0]);
    expect(claimed[0]).toHaveLength(1);
    const rows = await target.query(`select id::text as id, state, attempt, attempted_by from "${s}".jobs order by id`);
    expect(rows.map((r) => [r.id === handedOff, r.state, r.attempt, r.attempted_by])).toEqual([
      [true, 'running', 1, 'solo'], [false, 'available', 0, null], [false, 'available', 0, null],
    ]);
    gate.resolve();
    await all.done;
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
