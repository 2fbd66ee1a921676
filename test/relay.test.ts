// The relay: bounded rounds, coalescing per subject, poisoning of a row that keeps failing, and
// several bus instances sharing one database.
import pg from 'pg';
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { createBus, defineEvents } from '../src/index.js';
import { describeTargets, freshSchema, PG_URL, postgresTarget, testBus } from './helpers/db.js';
import { rejectJobsFor } from './helpers/faults.js';
import { counter, deferred } from './helpers/signals.js';

const events = defineEvents({
  'note.imported': z.object({ noteId: z.string(), n: z.number() }),
  'order.created': z.object({ orderNo: z.string() }),
});

describeTargets('relay on $name', (target) => {
  const test = it.skipIf(!target.available);

  test('a 2,000-event import fans out in rounds of at most 200; coalescing gets ≤ 1 job per subject per round', async () => {
    const bus = await testBus(target, events);
    const perEvent = counter(2000);
    const coalescedSeen: number[] = [];
    bus.on('note.imported', 'search-index', (_e, ctx) => {
      coalescedSeen.push(ctx.coalesced);
    }, { coalesce: 'subject' });
    bus.on('note.imported', 'backup', () => perEvent.tick());

    // 2,000 notes over 20 subjects (folders), all in one transaction, before the relay runs.
    await bus.transaction((tx) =>
      bus.recordMany(tx, Array.from({ length: 2000 }, (_, i) => ({
        type: 'note.imported' as const, payload: { noteId: `n${i}`, n: i }, subject: `folder-${i % 20}`,
      }))),
    );
    const rounds: { events: number; ids: string[] }[] = [];
    bus.lifecycle.on('relay:batch:fanned', (b) => rounds.push({ events: b.eventIds.length, ids: b.eventIds }));
    await bus.start();
    await perEvent.done;

    expect(rounds.reduce((n, r) => n + r.events, 0)).toBe(2000);
    expect(Math.max(...rounds.map((r) => r.events))).toBeLessThanOrEqual(200);
    expect(rounds.length).toBeGreaterThanOrEqual(10);

    const s = bus.schema;
    // Per round: one search-index job per subject, standing for the newest event of it.
    for (const round of rounds) {
      const jobs = await target.query<{ subject: string; n: number }>(
        `select e.subject, count(*)::int as n from "${s}".jobs j join "${s}".events e on e.id = j.event_id
         where j.target = 'search-index' and j.event_id = any($1::uuid[]) group by e.subject`, [round.ids]);
      for (const j of jobs) expect(j.n).toBe(1);
    }
    const totals = await target.query<{ target: string; jobs: number; events: number }>(
      `select target, count(*)::int as jobs, sum(coalesced)::int as events from "${s}".jobs group by target order by target`);
    expect(totals.find((t) => t.target === 'backup')).toEqual({ target: 'backup', jobs: 2000, events: 2000 });
    const search = totals.find((t) => t.target === 'search-index')!;
    expect(search.events).toBe(2000);
    expect(search.jobs).toBeLessThanOrEqual(20 * rounds.length);
    expect(search.jobs).toBeLessThan(2000);

    // The coalesced job carries the newest event of its subject in its round.
    const newest = await target.query<{ ok: boolean }>(`
      select bool_and(j.event_id = (select max(e2.id::text)::uuid from "${s}".events e2 where e2.subject = e.subject and e2.fanned_out_at = e.fanned_out_at)) as ok
      from "${s}".jobs j join "${s}".events e on e.id = j.event_id where j.target = 'search-index'`);
    expect(newest[0]!.ok).toBe(true);
  });

  test('a row that fails fan-out 5 times is poisoned, stops blocking the rest, and requeue brings it back', async () => {
    const bus = await testBus(target, events);
    const s = bus.schema;
    // Fault injection in the real database: inserting a job for order BOOM fails.
    const undo = await rejectJobsFor(target, s);
    const done = counter(3);
    const handled: string[] = [];
    bus.on('order.created', 'h', (e) => {
      handled.push(e.payload.orderNo);
      done.tick();
    });
    await bus.start();
    const poisoned = bus.lifecycle.waitFor('relay:event:poisoned');
    const ids = await bus.transaction(async (tx) => [
      await bus.record(tx, 'order.created', { orderNo: 'A' }),
      await bus.record(tx, 'order.created', { orderNo: 'BOOM' }),
      await bus.record(tx, 'order.created', { orderNo: 'C' }),
    ]);
    const p = await poisoned;
    expect(p.eventId).toBe(ids[1]);
    expect(p.error).toContain('downstream constraint rejects BOOM');
    const row = await bus.events.get(ids[1]!);
    expect(row).toMatchObject({ fanAttempts: 5, fannedOutAt: null, lastError: expect.stringContaining('rejects BOOM') });
    expect(row!.poisonedAt).toBeInstanceOf(Date);
    expect((await bus.overview()).poisoned).toBe(1);

    // Fix the cause, requeue, and the event goes through.
    await undo();
    expect(await bus.events.requeue({ poisoned: true })).toEqual([ids[1]]);
    await done.done;
    expect(handled.sort()).toEqual(['A', 'BOOM', 'C']);
    expect((await bus.events.get(ids[1]!))).toMatchObject({ fanAttempts: 0, poisonedAt: null, lastError: null });
    expect((await bus.overview()).poisoned).toBe(0);
  });

  test('a row whose fan-out is always cancelled (statement_timeout, 57014) is tried alone and poisoned; it does not stall the rest', async () => {
    const bus = await testBus(target, events);
    await rejectJobsFor(target, bus.schema, 'SLOW', '57014');
    const done = counter(2);
    bus.on('order.created', 'h', () => done.tick());
    await bus.start();
    const poisoned = bus.lifecycle.waitFor('relay:event:poisoned');
    const ids = await bus.transaction(async (tx) => [
      await bus.record(tx, 'order.created', { orderNo: 'A' }),
      await bus.record(tx, 'order.created', { orderNo: 'SLOW' }),
      await bus.record(tx, 'order.created', { orderNo: 'C' }),
    ]);
    expect((await poisoned).eventId).toBe(ids[1]);
    await done.done;
    expect(await bus.events.get(ids[1]!)).toMatchObject({ fanAttempts: 5, fannedOutAt: null });
  });

  test('two bus instances on one database: 5,000 events, every job runs exactly once', async () => {
    const schema = freshSchema();
    const a = await testBus(target, events, { schema, instanceId: 'bus-a' });
    const b = createBus({ database: target.database(), schema, events, instanceId: 'bus-b' });
    const runs = new Map<string, number>();
    const all = counter(5000);
    for (const bus of [a, b]) {
      bus.on('order.created', 'count', (e) => {
        runs.set(e.id, (runs.get(e.id) ?? 0) + 1);
      }, { concurrency: 8 });
      bus.lifecycle.on('job:completed', () => all.tick());
    }
    await Promise.all([a.start(), b.start()]);
        for (let i = 0; i < 50; i++) {
      const bus = i % 2 ? a : b;
      await bus.transaction((tx) =>
        bus.recordMany(tx, Array.from({ length: 100 }, (_, j) => ({ type: 'order.created' as const, payload: { orderNo: `${i}-${j}` } }))));
    }
    await all.done;
    await b.stop();
    expect(runs.size).toBe(5000);
    expect([...runs.values()].every((n) => n === 1)).toBe(true);
    const rows = await target.query(`select state, count(*)::int as n from "${schema}".jobs group by state`);
    expect(rows).toEqual([{ state: 'completed', n: 5000 }]);
    const workers = await target.query(`select count(distinct attempted_by)::int as n from "${schema}".jobs`);
    expect(workers[0].n).toBe(2);
  });
});

describe.skipIf(!postgresTarget.available)('relay errors on postgres', () => {
  it('a round run beside the poll loop (a drainer) that fails emits relay:error, as the loop\'s rounds do', async () => {
    const target = postgresTarget;
    // The poll loop's round waits in an inline round for a held handler; a commit seen meanwhile
    // gets a round of its own beside it, and that round fails on a locked table (lock_not_available).
    const bus = await testBus(target, events, { relay: { inlineMs: 10_000 } });
    const s = `"${bus.schema}"`;
    await target.query(`
      create table ${s}.fence (x int);
      create function ${s}.fence_fan() returns trigger language plpgsql as $$
      begin
        if new.fanned_out_at is not null and new.payload->>'orderNo' = 'LOCKED' then
          perform set_config('lock_timeout', '100ms', true);
          lock table ${s}.fence in access share mode;
        end if;
        return new;
      end $$;
      create trigger fence_fan before update on ${s}.events for each row execute function ${s}.fence_fan();`);
    const held = deferred();
    const gate = deferred();
    const handled: string[] = [];
    bus.on('order.created', 'ship', async (e) => {
      if (e.payload.orderNo === 'A') {
        held.resolve();
        await gate.promise;
      }
      handled.push(e.payload.orderNo);
    });
    const errors: Error[] = [];
    bus.lifecycle.on('relay:error', (e) => errors.push(e.error));
    await bus.start();
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'A' }));
    await held.promise;
    const locker = new pg.Client({ connectionString: PG_URL });
    await locker.connect();
    try {
      await locker.query('begin');
      await locker.query(`lock table ${s}.fence in access exclusive mode`);
      const failed = bus.lifecycle.waitFor('relay:error', () => true, 5000);
      await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'LOCKED' }));
      const { error } = await failed;
      expect(error).toBeInstanceOf(Error);
      expect(error).toMatchObject({ code: '55P03' });
      // The loop's round still waits for A's handler: the error came from the round beside it.
      expect(handled).toEqual([]);
      expect(errors).toEqual([error]);
    } finally {
      await locker.query('rollback').catch(() => {});
      await locker.end();
      gate.resolve();
    }
    await vi.waitFor(() => expect(handled.toSorted()).toEqual(['A', 'LOCKED']), { timeout: 5000 });
  });
});
