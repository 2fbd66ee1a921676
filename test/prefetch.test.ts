// The worker's prefetch buffer: jobs claimed ahead of free slots start in order, and a job that
// waits too long to start inside its lease goes back to the queue instead of risking a rescue
// while it runs.
import { expect, it } from 'vitest';
import { z } from 'zod';
import { defineEvents } from '../src/index.js';
import { describeTargets, testBus } from './helpers/db.js';
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
});
