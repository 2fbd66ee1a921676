// Inline delivery: a relay round runs this process's plain handlers itself, with its transaction
// open, for at most relay.inlineMs. A delivery that succeeds in that time has no job row and is
// named on its event; every other one gets a row when the round ends, as the run left it. A round
// that does not commit stores nothing, so its events are delivered again.
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { createAdminHandler, createBus, defineEvents, OptionsError, retryAfter } from '../src/index.js';
import { bearer, call, login, serve, TOKEN } from './helpers/admin.js';
import { postgresTarget, pgliteTarget, quickBackoff, testBus, type Target } from './helpers/db.js';
import { holdNextClaim } from './helpers/faults.js';
import { captureLogger } from './helpers/log.js';
import { counter, deferred } from './helpers/signals.js';

const events = defineEvents({ 'order.created': z.object({ n: z.number() }) });

interface JobView { event_id: string; target: string; state: string; attempt: number; attempted_by: string | null; errors: number }

function views(target: Target, schema: string) {
  return {
    jobs: () => target.query<JobView>(
      `select event_id::text, target, state, attempt, attempted_by, jsonb_array_length(errors) as errors
       from "${schema}".jobs order by id`),
    events: () => target.query<{ id: string; fanned: boolean; delivered_inline: string[] | null }>(
      `select id::text, fanned_out_at is not null as fanned, delivered_inline from "${schema}".events order by id`),
  };
}

async function recordAll(bus: Awaited<ReturnType<typeof testBus<typeof events.schemas>>>, ns: number[]): Promise<string[]> {
  return bus.transaction(async (tx) => {
    const ids: string[] = [];
    for (const n of ns) ids.push(await bus.record(tx, 'order.created', { n }));
    return ids;
  });
}

/** The ids of the events whose relay rounds ended (committed), as they end. */
function fannedEvents(bus: Awaited<ReturnType<typeof testBus<typeof events.schemas>>>): string[] {
  const ids: string[] = [];
  bus.lifecycle.on('relay:batch:fanned', (e) => ids.push(...e.eventIds));
  return ids;
}

/** Two events to one plain handler: each delivery ends as a completed job row, none inline. */
async function expectJobRowsForAll(target: Target, options: { relay?: { inlineMs: number } }) {
  const bus = await testBus(target, events, options);
  const v = views(target, bus.schema);
  const ran = counter(2);
  bus.on('order.created', 'ship', () => ran.tick());
  await bus.start();
  await recordAll(bus, [1, 2]);
  await ran.done;
  await vi.waitFor(async () => expect((await v.jobs()).map((j) => j.state)).toEqual(['completed', 'completed']));
  expect((await v.events()).map((e) => e.delivered_inline)).toEqual([null, null]);
}

describe('inline delivery on postgres', () => {
  const test = it.skipIf(!postgresTarget.available);
  const target = postgresTarget;

  test('a job handed off by a round that waited past half the lease margin goes back to the queue instead of starting on an expired lease', async () => {
    // Its lease ran from the round's start, the worker's clock from the hand-over: a transactional
    // job with a short timeout started after its lease had expired, and the rescuer took it back while it ran.
    const bus = await testBus(target, events, { relay: { inlineMs: 600 }, worker: { leaseMarginMs: 200 } });
    const s = bus.schema;
    const leaseLive: boolean[] = [];
    bus.on('order.created', 'slow-plain', () => new Promise((r) => setTimeout(r, 400)));
    bus.on('order.created', 'audit', async (_e, ctx) => {
      const { rows } = await ctx.tx!.query(`select lease_expires_at > clock_timestamp() as live from "${s}".jobs where id = $1`, [ctx.jobId]);
      leaseLive.push((rows[0] as { live: boolean }).live);
    }, { transactional: true, timeoutMs: 100 });
    await bus.start();
    const done = bus.lifecycle.waitFor('job:completed', (e) => e.handler === 'audit');
    await recordAll(bus, [1]);
    await done;
    expect(leaseLive).toEqual([true]);
  });

  test('a plain handler that succeeds in the round has no job row and is named on the event; a transactional one still has its row', async () => {
    const bus = await testBus(target, events, { instanceId: 'solo', relay: { inlineMs: 50 } });
    const v = views(target, bus.schema);
    const shipped = counter(3);
    const audited = counter(3);
    bus.on('order.created', 'ship', () => shipped.tick());
    bus.on('order.created', 'audit', async (_e, ctx) => {
      await ctx.tx!.query(`select 1`);
      audited.tick();
    }, { transactional: true });
    const completed: { handler: string; jobId: string }[] = [];
    bus.lifecycle.on('job:completed', (e) => completed.push({ handler: e.handler, jobId: e.jobId }));
    await bus.start();
    const ids = await recordAll(bus, [1, 2, 3]);
    await Promise.all([shipped.done, audited.done]);
    await vi.waitFor(async () => expect((await v.jobs()).map((j) => j.state)).toEqual(['completed', 'completed', 'completed']));

    const jobs = await v.jobs();
    expect(jobs.map((j) => j.target)).toEqual(['audit', 'audit', 'audit']);
    expect((await v.events()).map((e) => [e.id, e.fanned, e.delivered_inline])).toEqual(ids.map((id) => [id, true, ['ship']]));
    expect((await bus.events.get(ids[0]!))!.deliveredInline).toEqual(['ship']);
    expect(completed.filter((c) => c.handler === 'ship')).toHaveLength(3);
    expect(shipped.value).toBe(3);
    expect(audited.value).toBe(3);

    // The API and the panel say who received the event inline.
    const s = await serve(createAdminHandler(bus, { auth: { token: TOKEN } }));
    const api = await call(s.url, 'GET', `/api/events/${ids[0]}`, { headers: bearer() });
    expect(api.json.event.deliveredInline).toEqual(['ship']);
    expect(api.json.jobs.map((j: { target: string }) => j.target)).toEqual(['audit']);
    const page = await call(s.url, 'GET', `/events/${ids[0]}`, { headers: { cookie: await login(s.url) } });
    expect(page.text).toMatch(/Delivered inline<\/dt><dd><code>ship<\/code>/);
  });

  test('an inline delivery that fails gets a retryable row with its error, and the retry runs from the queue', async () => {
    const bus = await testBus(target, events, { instanceId: 'solo', relay: { inlineMs: 50 } });
    const v = views(target, bus.schema);
    const attempts: number[] = [];
    const done = deferred();
    bus.on('order.created', 'flaky', (_e, ctx) => {
      attempts.push(ctx.attempt);
      if (ctx.attempt === 1) throw new Error('warehouse busy');
      done.resolve();
    }, { backoff: quickBackoff });
    const failed: number[] = [];
    bus.lifecycle.on('job:failed', (e) => failed.push(e.attempt));
    await bus.start();
    const [id] = await recordAll(bus, [1]);
    await done.promise;
    await vi.waitFor(async () => expect((await v.jobs()).map((j) => j.state)).toEqual(['completed']));

    expect(attempts).toEqual([1, 2]);
    expect(failed).toEqual([1]);
    const [job] = await v.jobs();
    expect(job).toMatchObject({ event_id: id, target: 'flaky', attempt: 2, errors: 1 });
    expect((await v.events())[0]!.delivered_inline).toBeNull();
  });

  test('an inline failure\'s retry is due its delay after the failure, not after the round began: a slow sibling in the round does not bring it forward', async () => {
    const bus = await testBus(target, events, { instanceId: 'solo', relay: { inlineMs: 2000 } });
    let failedAt: Date | undefined;
    bus.on('order.created', 'flaky', async () => {
      failedAt = (await target.query<{ t: Date }>('select clock_timestamp() as t'))[0]!.t;
      throw retryAfter(60_000);
    });
    // Keeps the round open 400 ms after the failure.
    bus.on('order.created', 'slow', () => new Promise((resolve) => setTimeout(resolve, 400)));
    await bus.start();
    await recordAll(bus, [1]);
    const row = () => target.query<{ scheduled_at: Date }>(`select scheduled_at from "${bus.schema}".jobs where target = 'flaky'`);
    await vi.waitFor(async () => expect(await row()).toHaveLength(1), { timeout: 5000 });
    const [{ scheduled_at }] = (await row()) as [{ scheduled_at: Date }];
    // By the database's clock both: due 60 s after the failure (the statement's time less the
    // failure's age), not 60 s after the round's BEGIN, ~400 ms earlier.
    expect(scheduled_at.getTime() - failedAt!.getTime()).toBeGreaterThanOrEqual(60_000 - 50);
    expect(scheduled_at.getTime() - failedAt!.getTime()).toBeLessThan(60_000 + 300);
  });

  test('a delivery still running when the wait ends becomes a running row of this worker; ones not started go to the queue', async () => {
    const bus = await testBus(target, events, { instanceId: 'solo', relay: { inlineMs: 20 }, worker: { concurrency: 1, prefetch: 0 } });
    const v = views(target, bus.schema);
    const gate = deferred();
    const started = deferred();
    const ran = counter(3);
    bus.on('order.created', 'slow', async () => {
      started.resolve();
      await gate.promise;
      ran.tick();
    });
    await bus.start();
    await recordAll(bus, [1, 2, 3]);
    await started.promise;
    // The round ended after 20 ms with the first delivery running and two never started. (A claim
    // of the worker's that was in flight as the round began may take one of those two, and hands
    // it straight back: the test below; hence a wait for the rows rather than one read.)
    await vi.waitFor(async () => expect((await v.jobs()).map((r) => [r.state, r.attempt, r.attempted_by])).toEqual([
      ['running', 1, 'solo'], ['available', 0, null], ['available', 0, null],
    ]));
    expect((await v.events()).every((e) => e.fanned && e.delivered_inline === null)).toBe(true);

    gate.resolve();
    await ran.done;
    await vi.waitFor(async () => expect((await v.jobs()).map((j) => [j.state, j.attempt])).toEqual([['completed', 1], ['completed', 1], ['completed', 1]]));
    expect(ran.value).toBe(3);
  });

  test('a claim in flight while an inline round takes the only slot hands back what no longer fits, at once', async () => {
    // leaseMarginMs 60 s: a job left in the buffer would wait 30 s to go stale, far past this test.
    const bus = await testBus(target, events, { instanceId: 'solo', relay: { inlineMs: 20 }, worker: { concurrency: 1, prefetch: 0, leaseMarginMs: 60_000 } });
    const v = views(target, bus.schema);
    const gate = deferred();
    const started: string[] = [];
    bus.on('order.created', 'slow', async (e) => {
      started.push(e.id);
      await gate.promise;
    });
    // The worker's next claim is held on its way to the database, after it counted one free slot.
    const { hold, sent, letGo, claimed } = holdNextClaim(bus);
    const released: string[] = [];
    bus.lifecycle.on('jobs:released', (e) => released.push(...e.jobIds));
    await bus.start();
    hold();
    await sent;

    const ids = await recordAll(bus, [1, 2, 3]);
    // The round took the slot for the first event and queued the other two.
    await vi.waitFor(async () => expect((await v.jobs()).map((r) => r.state)).toEqual(['running', 'available', 'available']));
    letGo();
    await vi.waitFor(() => expect(claimed).toHaveLength(1));
    expect(claimed[0]).toHaveLength(1);
    await vi.waitFor(() => expect(released).toEqual(claimed[0]), { timeout: 5000 });
    const rows = await v.jobs();
    expect(rows.map((r) => [r.state, r.attempt, r.attempted_by])).toEqual([
      ['running', 1, 'solo'], ['available', 0, null], ['available', 0, null],
    ]);
    expect(started).toEqual([rows[0]!.event_id]);

    gate.resolve();
    await vi.waitFor(async () => expect((await v.jobs()).map((j) => [j.state, j.attempt])).toEqual([['completed', 1], ['completed', 1], ['completed', 1]]));
    expect(started.toSorted()).toEqual(ids.toSorted());
  });

  /**
   * The round waits for its handler, its transaction idle: end that session, as a failover would.
   * Only the round that holds the event has written (backend_xid): a round started beside it for a
   * wake-up (the LISTEN connection's first nudge) claims nothing and commits at once, but may be
   * caught idle in its transaction between statements, which made these tests fail at times.
   */
  const endWaitingRound = async (schema: string) => {
    const killed = await target.query<{ pid: number }>(
      `select pg_terminate_backend(pid) as ok, pid from pg_stat_activity
       where state = 'idle in transaction' and backend_xid is not null and datname = current_database() and query like $1`,
      [`%"${schema}".events%`],
    );
    expect(killed).toHaveLength(1);
  };

  test('a round whose transaction is cut off stores nothing, and its events are delivered again', async () => {
    const bus = await testBus(target, events, { instanceId: 'solo', relay: { inlineMs: 5000 } });
    const v = views(target, bus.schema);
    const firstRun = deferred();
    const release = deferred();
    const runs: number[] = [];
    const again = deferred();
    bus.on('order.created', 'ship', async (e) => {
      runs.push(e.payload.n);
      if (runs.length === 1) {
        firstRun.resolve();
        await release.promise;
      } else {
        again.resolve();
      }
    });
    await bus.start();
    const [id] = await recordAll(bus, [7]);
    await firstRun.promise;
    await endWaitingRound(bus.schema);
    expect((await v.events())[0]!.fanned).toBe(false);
    release.resolve();
    await again.promise;
    await vi.waitFor(async () => expect((await v.events())[0]!.fanned).toBe(true));

    expect(runs).toEqual([7, 7]);
    expect(await v.jobs()).toEqual([]);
    expect((await v.events())[0]).toMatchObject({ id, delivered_inline: ['ship'] });
  });

  // A failure is logged once stored, with its due time as stored; one whose round never commits is
  // stored nowhere, and its error went unsaid.
  test('a failure in a round that does not commit is logged as not recorded, and the event is delivered again', async () => {
    const lines: Record<string, unknown>[] = [];
    const bus = await testBus(target, events, { relay: { inlineMs: 5000 }, logger: captureLogger(lines) });
    const v = views(target, bus.schema);
    const firstRun = deferred();
    const release = deferred();
    const again = deferred();
    let runs = 0;
    bus.on('order.created', 'ship', async () => {
      if (++runs > 1) return again.resolve();
      firstRun.resolve();
      await release.promise;
      throw new TypeError('carrier down');
    });
    await bus.start();
    await recordAll(bus, [7]);
    await firstRun.promise;
    await endWaitingRound(bus.schema);
    release.resolve();
    await again.promise;
    expect(lines.filter((l) => l.handler === 'ship' && l.level === 'warn').map((l) => [l.msg, l.err, l.err_name])).toEqual([
      ['job failed in an inline round that did not commit; not recorded, and its event will be delivered again', 'carrier down', 'TypeError'],
    ]);
    expect(await v.jobs()).toEqual([]);
  });

  test('a coalescing handler gets one inline delivery per subject, named on the newest event of it', async () => {
    const bus = await testBus(target, events, { relay: { inlineMs: 50 } });
    const v = views(target, bus.schema);
    const got = deferred<{ id: string; coalesced: number }>();
    bus.on('order.created', 'latest', (e, ctx) => got.resolve({ id: e.id, coalesced: ctx.coalesced }), { coalesce: 'subject' });
    await bus.start();
    const ids = await bus.transaction(async (tx) => {
      const out: string[] = [];
      for (const n of [1, 2, 3]) out.push(await bus.record(tx, 'order.created', { n }, { subject: 'order-9' }));
      return out;
    });
    expect(await got.promise).toEqual({ id: ids[2], coalesced: 3 });
    await vi.waitFor(async () => expect((await v.events()).every((e) => e.fanned)).toBe(true));
    expect((await v.events()).map((e) => e.delivered_inline)).toEqual([null, null, ['latest']]);
    expect(await v.jobs()).toEqual([]);
  });

  test('a round\'s deliveries start in priority order, as a claim\'s do, whatever order the handlers were registered in', async () => {
    // The round's jobs came grouped by handler: with one slot, the low-priority handler registered
    // first ran all of its deliveries before the first of the high-priority one. One round at a
    // time (relay.concurrency 1): with two, a round run beside the idle probe (one that took 5 ms,
    // on a loaded machine) could take events 2 and 3 while the other took event 1.
    const bus = await testBus(target, events, { relay: { inlineMs: 1000, concurrency: 1 }, worker: { concurrency: 1 } });
    const order: string[] = [];
    const ran = counter(6);
    bus.on('order.created', 'low', (e) => { order.push(`low:${e.payload.n}`); ran.tick(); }, { priority: 10 });
    bus.on('order.created', 'high', (e) => { order.push(`high:${e.payload.n}`); ran.tick(); }, { priority: -10 });
    await bus.start();
    await recordAll(bus, [1, 2, 3]);
    await ran.done;
    expect(order).toEqual(['high:1', 'high:2', 'high:3', 'low:1', 'low:2', 'low:3']);
    // All six in one round, inline: none has a job row.
    await vi.waitFor(async () => expect((await views(target, bus.schema).events()).map((e) => e.delivered_inline)).toEqual([['high', 'low'], ['high', 'low'], ['high', 'low']]));
  });

  test('webhook jobs made by an inline round are queued once it commits', async () => {
    const bus = await testBus(target, events, { relay: { inlineMs: 50 }, webhooks: { allowPrivateNetworks: true, enabled: false } });
    const v = views(target, bus.schema);
    const ran = deferred();
    bus.on('order.created', 'ship', () => ran.resolve());
    await bus.endpoints.create({ url: 'http://127.0.0.1:9/hook', eventTypes: ['order.*'] });
    await bus.start();
    const [id] = await recordAll(bus, [1]);
    await ran.promise;
    await vi.waitFor(async () => expect((await v.jobs()).map((j) => [j.event_id, j.target.length > 0, j.state])).toEqual([[id, true, 'available']]));
    expect((await v.events())[0]!.delivered_inline).toEqual(['ship']);
  });

  test('stop() ends a round\'s wait at once: a delivery still running keeps its row and is handled by the worker\'s stop', async () => {
    const bus = await testBus(target, events, { instanceId: 'solo', relay: { inlineMs: 10_000 } });
    const v = views(target, bus.schema);
    const started = deferred();
    bus.on('order.created', 'slow', async (_e, ctx) => {
      started.resolve();
      await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
    });
    await bus.start();
    await recordAll(bus, [1]);
    await started.promise;
    const t0 = performance.now();
    await bus.stop({ timeoutMs: 200 });
    // Not the round's 10 s: the wait ended, the row was written, then the worker's stop aborted the run.
    expect(performance.now() - t0).toBeLessThan(5000);
    const [job] = await v.jobs();
    expect(job).toMatchObject({ target: 'slow', state: 'retryable', attempt: 0, errors: 1 });
    expect((await v.events())[0]).toMatchObject({ fanned: true, delivered_inline: null });
  });

  test('a round waiting for a slow handler does not hold back an event committed meanwhile: it gets a round beside it', async () => {
    const bus = await testBus(target, events, { instanceId: 'solo', relay: { inlineMs: 10_000 } });
    const v = views(target, bus.schema);
    const slowStarted = deferred();
    const release = deferred();
    const ran: number[] = [];
    const secondRan = deferred();
    bus.on('order.created', 'ship', async (event) => {
      ran.push(event.payload.n);
      if (event.payload.n === 1) {
        slowStarted.resolve();
        await release.promise;
      } else {
        secondRan.resolve();
      }
    });
    const roundsEnded = fannedEvents(bus);
    await bus.start();
    const [first] = await recordAll(bus, [1]);
    await slowStarted.promise; // the first round now waits (up to 10 s) for this delivery
    await recordAll(bus, [2]);
    // Held back, the second event would be delivered only once the first round ended: at its 10 s,
    // as the release below comes after. (Not a race against a timer: a loaded machine took 3 s.)
    await secondRan.promise;
    expect(roundsEnded).not.toContain(first);
    release.resolve();
    expect(ran).toEqual([1, 2]);
    // Both deliveries were inline, each in its own round: no job rows.
    await vi.waitFor(async () => expect((await v.events()).map((e) => e.delivered_inline)).toEqual([['ship'], ['ship']]));
    expect(await v.jobs()).toEqual([]);
  });

  test('a commit that finds the round beside a waiting one taken gets a round once that one ends, not at the waiting round\'s end', async () => {
    // relay.concurrency 2: one round beside the poll loop's. A commit seen while the loop's round
    // waited, and the round beside it still ran (it had claimed its events before the commit),
    // found no room and was left to the loop, whose round ended only at its release or its
    // inlineMs. Seen under load in the test above: the round beside, started for the first commit
    // while the idle probe was slow, lost that event to the loop's round and was still closing its
    // empty transaction when the second commit came. Here the round beside waits on a handler.
    const bus = await testBus(target, events, { instanceId: 'solo', relay: { inlineMs: 10_000, minPollMs: 60_000, maxPollMs: 60_000 } });
    const started = new Map([1, 2, 3].map((n) => [n, deferred()]));
    const release = new Map([1, 3].map((n) => [n, deferred()]));
    bus.on('order.created', 'ship', async (event) => {
      started.get(event.payload.n)!.resolve();
      await release.get(event.payload.n)?.promise;
    });
    // The loop's first round, at start, ends before the first commit (and no timer runs another
    // for 60 s): the first event's round is the loop's, not one beside it.
    const firstRound = deferred();
    const executor = bus.driver.executor;
    const claimable = executor.eventClaimable.bind(executor);
    executor.eventClaimable = () => claimable().finally(() => firstRound.resolve());
    const fanOut = executor.eventFanOut.bind(executor);
    executor.eventFanOut = (q, p) => fanOut(q, p).finally(() => firstRound.resolve());
    const roundsEnded = fannedEvents(bus);
    await bus.start();
    await firstRound.promise;
    const [first] = await recordAll(bus, [1]);
    await started.get(1)!.promise; // the loop's round waits
    await recordAll(bus, [3]);
    await started.get(3)!.promise; // so does the round beside it: no room left
    await recordAll(bus, [2]);
    release.get(3)!.resolve();
    await started.get(2)!.promise;
    expect(roundsEnded).not.toContain(first);
    release.get(1)!.resolve();
    await vi.waitFor(() => expect(roundsEnded).toHaveLength(3));
  });

  test('a commit seen while the idle probe hangs (a database that stalls) gets a round beside it, with the worker\'s room', async () => {
    const bus = await testBus(target, events, { instanceId: 'solo', relay: { inlineMs: 50 } });
    const v = views(target, bus.schema);
    const delivered = deferred();
    bus.on('order.created', 'ship', () => delivered.resolve());
    // Once armed, the next probe hangs until released, as one caught in a stall would.
    const probe = bus.driver.executor.eventClaimable.bind(bus.driver.executor);
    const hung = deferred();
    const release = deferred();
    let armed = false;
    bus.driver.executor.eventClaimable = async () => {
      if (armed) {
        armed = false;
        hung.resolve();
        await release.promise;
      }
      return probe();
    };
    await bus.start();
    armed = true;
    await hung.promise;
    await recordAll(bus, [1]);
    const outcome = await Promise.race([
      delivered.promise.then(() => 'delivered'),
      new Promise((resolve) => setTimeout(() => resolve('held back behind the probe'), 3000)),
    ]);
    release.resolve();
    expect(outcome).toBe('delivered');
    // Inline, in the round beside the probe: no job row.
    await vi.waitFor(async () => expect((await v.events()).map((e) => e.delivered_inline)).toEqual([['ship']]));
    expect(await v.jobs()).toEqual([]);
  });

  test('a round whose COMMIT the server is slow to answer does not hold back an event committed meanwhile: it gets a round beside it', async () => {
    // As a checkpoint's writes slow the WAL's flush: the round has delivered its events and waits
    // for its COMMIT. A commit seen then waited for that COMMIT before its own round began: at 200
    // events/s with a checkpoint under way beside a large update, events were delivered 120-140 ms
    // after their commits, behind a round's COMMIT of ~130 ms.
    const bus = await testBus(target, events, { instanceId: 'solo', relay: { inlineMs: 50 } });
    const v = views(target, bus.schema);
    const ran = new Map([1, 2].map((n) => [n, deferred()]));
    let first: string | undefined;
    bus.on('order.created', 'ship', (event) => {
      if (event.payload.n === 1) first = event.id;
      ran.get(event.payload.n)!.resolve();
    });
    // The round that delivered the first event holds its transaction open after its statements,
    // until released.
    const transaction = bus.driver.transaction.bind(bus.driver);
    const committing = deferred();
    const release = deferred();
    bus.driver.transaction = ((fn, options) => transaction(async (q, raw) => {
      const result = await fn(q, raw);
      if (first !== undefined && (result as { eventIds?: string[] } | undefined)?.eventIds?.includes(first)) {
        committing.resolve();
        await release.promise;
      }
      return result;
    }, options)) as typeof bus.driver.transaction;
    const roundsEnded = fannedEvents(bus);
    await bus.start();
    await recordAll(bus, [1]);
    await ran.get(1)!.promise;
    await committing.promise; // the first round has delivered and waits for its COMMIT
    await recordAll(bus, [2]);
    const outcome = await Promise.race([
      ran.get(2)!.promise.then(() => 'delivered'),
      new Promise((resolve) => setTimeout(() => resolve('held back behind the COMMIT'), 3000)),
    ]);
    expect(roundsEnded).not.toContain(first);
    release.resolve();
    expect(outcome).toBe('delivered');
    await vi.waitFor(() => expect(roundsEnded).toContain(first));
    // Both inline, each in its own round: no job rows.
    await vi.waitFor(async () => expect((await v.events()).map((e) => e.delivered_inline)).toEqual([['ship'], ['ship']]));
    expect(await v.jobs()).toEqual([]);
  });

  test('an idle relay asks with one statement whether there is an event, opening no transaction; the next event is still delivered inline', async () => {
    const bus = await testBus(target, events, { instanceId: 'solo', relay: { inlineMs: 50, minPollMs: 2, maxPollMs: 10 } });
    const v = views(target, bus.schema);
    const shipped = counter(1);
    bus.on('order.created', 'ship', () => shipped.tick());
    const probes = vi.spyOn(bus.driver.executor, 'eventClaimable');
    const rounds = vi.spyOn(bus.driver.executor, 'eventFanOut');
    await bus.start();
    // Once idle (start-up's own wake-up may run one round), polls are probes only.
    await vi.waitFor(() => expect(probes.mock.calls.length).toBeGreaterThanOrEqual(2));
    const roundsWhenIdle = rounds.mock.calls.length;
    const probesWhenIdle = probes.mock.calls.length;
    await vi.waitFor(() => expect(probes.mock.calls.length).toBeGreaterThanOrEqual(probesWhenIdle + 5));
    expect(rounds.mock.calls.length).toBe(roundsWhenIdle);

    const [id] = await recordAll(bus, [1]);
    await shipped.done;
    await vi.waitFor(async () => expect((await v.events()).map((e) => [e.id, e.fanned, e.delivered_inline])).toEqual([[id, true, ['ship']]]));
    expect(await v.jobs()).toEqual([]);
    expect(rounds.mock.calls.length).toBeGreaterThan(roundsWhenIdle);
  });

  test('the poll right after a round that delivered the events is a probe, not another transaction', async () => {
    const bus = await testBus(target, events, { instanceId: 'solo', relay: { inlineMs: 50, minPollMs: 2, maxPollMs: 200 } });
    const shipped = counter(2);
    bus.on('order.created', 'ship', () => shipped.tick());
    const calls: string[] = [];
    let probed: (() => void) | undefined;
    const probe = bus.driver.executor.eventClaimable.bind(bus.driver.executor);
    vi.spyOn(bus.driver.executor, 'eventClaimable').mockImplementation(async () => {
      const found = await probe();
      calls.push(found ? 'probe: found' : 'probe');
      probed?.();
      return found;
    });
    const fanOut = bus.driver.executor.eventFanOut.bind(bus.driver.executor);
    vi.spyOn(bus.driver.executor, 'eventFanOut').mockImplementation(async (...args) => {
      const r = await fanOut(...args);
      calls.push(`round: ${r.eventIds.length}`);
      return r;
    });
    await bus.start();
    // Idle: polls 64 ms or more apart. Record right after one, so the commit's wake-up starts the round.
    await vi.waitFor(() => expect(calls.filter((c) => c === 'probe').length).toBeGreaterThanOrEqual(6), { timeout: 5000 });
    await new Promise<void>((resolve) => (probed = resolve));
    probed = undefined;
    const from = calls.length;
    await recordAll(bus, [1, 2]);
    await shipped.done;
    await vi.waitFor(() => expect(calls.length).toBeGreaterThanOrEqual(from + 3));
    // The woken round takes both events; the timer's poll 2 ms later asks before it opens a transaction.
    expect(calls.slice(from, from + 3)).toEqual(['round: 2', 'probe', 'probe']);
  });

  test('the idle probe does not count an event another round holds locked', async () => {
    const bus = await testBus(target, events, { relay: { inlineMs: 50 } });
    const s = bus.schema;
    expect(await bus.driver.executor.eventClaimable()).toBe(false);
    const [id] = await recordAll(bus, [1]);
    expect(await bus.driver.executor.eventClaimable()).toBe(true);
    // Another process's open round: the event is locked until its transaction ends.
    await bus.transaction(async (tx) => {
      await tx.query(`select id from "${s}".events where id = $1 for update`, [id]);
      expect(await bus.driver.executor.eventClaimable()).toBe(false);
    });
    expect(await bus.driver.executor.eventClaimable()).toBe(true);
    await target.query(`update "${s}".events set fanned_out_at = now() where id = $1`, [id]);
    expect(await bus.driver.executor.eventClaimable()).toBe(false);
  });

  test('a process that freezes mid-round has its round ended by the server after 10 s idle: nothing of it is stored, and the event is delivered again', async () => {
    const bus = await testBus(target, events, { instanceId: 'frozen', relay: { inlineMs: 50 } });
    const v = views(target, bus.schema);
    const deliveries = counter(2);
    bus.on('order.created', 'ship', () => {
      deliveries.tick();
      // The first delivery blocks the whole process (a CPU-bound bug, a debugger pause), longer
      // than the 10 s the round's transaction may sit idle on the server.
      if (deliveries.value === 1) {
        const until = Date.now() + 10_500;
        while (Date.now() < until);
      }
    });
    await bus.start();
    const [id] = await recordAll(bus, [1]);
    await deliveries.done;
    // The second delivery is inline, in a round begun after the freeze. Or, when a second round had
    // sent its BEGIN before the freeze (relay.concurrency 2: a poll beside the frozen round), that
    // round takes the event once the server has ended the frozen one: its jobs' lease counts from
    // its BEGIN, 10 s back, so the worker does not start the job that late (its timeout would end
    // past its lease) but sends it to the queue, where a claim runs it: a job row, completed.
    const state = async () => ({
      events: (await v.events()).map((e) => [e.id, e.fanned, e.delivered_inline]),
      jobs: (await v.jobs()).map((j) => [j.target, j.state, j.attempt, j.attempted_by, j.errors]),
    });
    const inline = { events: [[id, true, ['ship']]], jobs: [] };
    const queued = { events: [[id, true, null]], jobs: [['ship', 'completed', 1, 'frozen', 0]] };
    await vi.waitFor(async () => expect([inline, queued]).toContainEqual(await state()), { timeout: 10_000 });
    expect(deliveries.value).toBe(2);
  }, 40_000);

  test('by default (relay.inlineMs 0) every delivery has its job row', async () => {
    await expectJobRowsForAll(target, {});
  });
});

describe('inline delivery elsewhere', () => {
  it('PGlite (one connection) never holds a round open: deliveries have job rows', async () => {
    await expectJobRowsForAll(pgliteTarget, { relay: { inlineMs: 50 } });
  });

  it('relay.inlineMs must be a whole number of ms from 0 to 10 000', () => {
    for (const inlineMs of [-1, 1.5, 10_001]) {
      expect(() => createBus({ database: pgliteTarget.database(), events, relay: { inlineMs } })).toThrow(OptionsError);
    }
    expect(() => createBus({ database: pgliteTarget.database(), events, relay: { inlineMs: -1 } })).toThrow(/relay\.inlineMs/);
  });
});
