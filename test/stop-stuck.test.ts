// bus.stop() while rea's statements wait on locks (a migration or an operator holding rea's
// tables, a server that stopped answering): the stop returns after its timeout and a few seconds,
// and once the locks go, the statements left running end and nothing keeps the process alive.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { Batcher } from '../src/core/batcher.js';
import { createBus, defineEvents } from '../src/index.js';
import { freshSchema, PG_URL, postgresTarget } from './helpers/db.js';
import { deferred } from './helpers/signals.js';

const events = defineEvents({ 'order.paid': z.object({ orderNo: z.string() }) });

describe.skipIf(!postgresTarget.available)('stop with statements stuck on locks, on postgres', () => {
  it('a relay round and a leader election waiting on locks hold the stop no longer than its timeout and the pool\'s close', async () => {
    const schema = freshSchema();
    // This bus's own connections, told apart from every other test's by their application name.
    const app = `rea_stuck_${randomBytes(4).toString('hex')}`;
    const url = new URL(PG_URL);
    url.searchParams.set('application_name', app);
    const bus = createBus({
      database: { postgres: url.toString(), poolSize: 4 }, schema, events,
      leader: { ttlMs: 600, renewMs: 100 }, relay: { minPollMs: 5, maxPollMs: 20 },
    });
    const locker = new pg.Client({ connectionString: PG_URL });
    let locked = false;
    try {
      await bus.migrate();
      bus.on('order.paid', 'warehouse', async () => {});
      const elected = bus.lifecycle.waitFor('leader:elected');
      await bus.start();
      await elected;
      await locker.connect();
      await locker.query('begin');
      await locker.query(`lock table "${schema}".events, "${schema}".leader in access exclusive mode`);
      locked = true;
      // Wait until the relay's round and the leader's renewal are both queued behind the locks.
      await expect.poll(async () => (await postgresTarget.query<{ query: string }>(
        `select query from pg_stat_activity where application_name = $1 and wait_event_type = 'Lock'`, [app],
      )).map((r) => (/\.leader\b/.test(r.query) ? 'leader' : /\.events\b/.test(r.query) ? 'events' : 'other')).sort(), { timeout: 5000 })
        .toEqual(expect.arrayContaining(['events', 'leader']));

      const began = performance.now();
      const outcome = await Promise.race([
        bus.stop({ timeoutMs: 500 }).then(() => 'stopped'),
        new Promise((r) => setTimeout(r, 10_000, 'still waiting after 10 s')),
      ]);
      expect(outcome).toBe('stopped');
      // At least a second for the stuck steps, then the pool's close waits 2 s for them.
      expect(performance.now() - began).toBeLessThan(6000);

      await locker.query('rollback');
      locked = false;
      // The statements left running end once the locks go, and their connections close.
      await expect.poll(async () => (await postgresTarget.query(
        `select count(*)::int as n from pg_stat_activity where application_name = $1`, [app],
      ))[0].n, { timeout: 10_000 }).toBe(0);
    } finally {
      if (locked) await locker.query('rollback').catch(() => {});
      await locker.end().catch(() => {});
      await bus.stop();
      await postgresTarget.query(`drop schema if exists "${schema}" cascade`);
    }
  });
});

describe('a drained batcher', () => {
  it('drain() waits for the write in flight, and tries again what it failed on (a completion lost at stop runs the job twice)', async () => {
    // The worker's stop drains its completions with flushMs 1: the write of a job that just ended
    // is usually in flight then. drain() saw no items pending and returned at once; the write then
    // failed (its connection dropped), its items went back to a drained batcher, which tries
    // nothing more, and the job stayed running until the rescuer gave it to another run.
    const written: number[][] = [];
    const first = deferred();
    let calls = 0;
    const batcher = new Batcher<number>({
      flushMs: 1, maxBatch: 10, onError: () => {},
      write: async (items) => {
        if (calls++ === 0) {
          await first.promise;
          throw new Error('Connection terminated unexpectedly');
        }
        written.push(items);
      },
    });
    batcher.push(1);
    await vi.waitFor(() => expect(calls).toBe(1)); // the write is in flight, nothing pending
    expect(batcher.pending).toBe(0);
    let drained = false;
    const drain = batcher.drain(5000).then(() => (drained = true));
    await new Promise((r) => setImmediate(r));
    expect(drained).toBe(false); // still waiting for the write in flight
    first.resolve();
    await drain;
    expect(written).toEqual([[1]]);
    expect(batcher.pending).toBe(0);
  });


  it('drain() waits for a write in flight no longer than its deadline (a statement stuck on a lock)', async () => {
    const batcher = new Batcher<number>({ flushMs: 1, maxBatch: 10, onError: () => {}, write: () => new Promise(() => {}) });
    batcher.push(1);
    void batcher.flush();
    const began = performance.now();
    await batcher.drain(100);
    expect(performance.now() - began).toBeLessThan(2000);
  });

  it('arms no timer for what a round left running at stop hands it later (its writes would fail on the closed pool for ever)', async () => {
    let writes = 0;
    const batcher = new Batcher<number>({
      flushMs: 1, maxBatch: 10, onError: () => {},
      write: async () => {
        writes++;
        throw new Error('Cannot use a pool after calling end on the pool');
      },
    });
    await batcher.drain(100);
    vi.useFakeTimers();
    try {
      batcher.push(1); // a job handed off by a relay round that ended after the stop returned
      expect(vi.getTimerCount()).toBe(0);
      await vi.advanceTimersByTimeAsync(60_000);
      expect(writes).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });
});
