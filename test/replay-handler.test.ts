// events.replay(eventId, { handler }): a stored event sent again to one in-process handler: to a
// handler added after the event (an unrouted event is a fact a later subscriber can replay), or to
// one whose effect must be made again. Refused by name where a new job would be wrong.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createAdminHandler } from '../src/admin/handler.js';
import { BusStateError, defineEvents, InvalidFilterError, NotFoundError, OptionsError } from '../src/index.js';
import { REPLAY_BATCH } from '../src/worker/replay.js';
import { bearer, call, login, serve, TOKEN } from './helpers/admin.js';
import { describeTargets, postgresTarget, testBus } from './helpers/db.js';

const events = defineEvents({
  'order.placed': z.object({ n: z.number() }),
  'user.created': z.object({ email: z.string() }),
});

describeTargets('replay to a handler on $name', (target) => {
  const test = it.skipIf(!target.available);

  test('a handler added after the event gets it, once, as a new job', async () => {
    // v1 had no subscriber for order.placed: the event was fanned out with no job.
    const v1 = await testBus(target, events);
    await v1.start();
    const fanned = v1.lifecycle.waitFor('relay:batch:fanned');
    const id = await v1.transaction((tx) => v1.record(tx, 'order.placed', { n: 7 }));
    await fanned;
    expect(await v1.jobs.forEvent(id)).toEqual([]);
    await v1.stop();

    const v2 = await testBus(target, events, { schema: v1.schema });
    const seen: { id: string; n: number; key: string }[] = [];
    v2.on('order.*', 'ledger', (event, ctx) => void seen.push({ id: event.id, n: (event.payload as { n: number }).n, key: ctx.idempotencyKey }));
    await v2.start();
    const done = v2.lifecycle.waitFor('job:completed');
    const made = await v2.events.replay(id, { handler: 'ledger' });
    expect(made).toEqual({ jobId: expect.stringMatching(/^\d+$/), eventId: id, handler: 'ledger' });
    await done;
    expect(seen).toEqual([{ id, n: 7, key: `${id}:ledger` }]);
    expect((await v2.jobs.forEvent(id)).map((j) => ({ id: j.id, target: j.target, state: j.state }))).toEqual([{ id: made.jobId, target: 'ledger', state: 'completed' }]);
  });

  test('a transactional handler that consumed the event runs again: its consume record goes', async () => {
    const bus = await testBus(target, events);
    await target.query(`create table "${bus.schema}".effects (event_id uuid, n int)`);
    bus.on('order.placed', 'effects', async (event, ctx) => {
      await ctx.tx!.query(`insert into "${bus.schema}".effects values ($1, $2)`, [event.id, (event.payload as { n: number }).n]);
    }, { transactional: true });
    await bus.start();
    let completed = bus.lifecycle.waitFor('job:completed');
    const id = await bus.transaction((tx) => bus.record(tx, 'order.placed', { n: 1 }));
    await completed;
    completed = bus.lifecycle.waitFor('job:completed');
    await bus.events.replay(id, { handler: 'effects' });
    await completed;
    // Without deleting the consume record, the replay would have been skipped as already consumed.
    expect(await target.query(`select n from "${bus.schema}".effects where event_id = $1`, [id])).toEqual([{ n: 1 }, { n: 1 }]);
    expect(await target.query(`select count(*)::int as n from "${bus.schema}".consumes where event_id = $1`, [id])).toEqual([{ n: 1 }]);
  });

  test('refused by name: no such event or handler, a type it does not take, not fanned out, poisoned, a job still waiting', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false } });
    bus.on('order.placed', 'ledger', () => {});
    await bus.start(); // stores the handler; nothing fans out or runs
    const missing = '0190a0a0-0000-7000-8000-000000000000';
    await expect(bus.events.replay(missing, { handler: 'ledger' })).rejects.toThrow(new NotFoundError(`event ${missing}`));
    // A key the handler form does not take is named, not dropped.
    await expect(bus.events.replay(missing, { handler: 'ledger', force: true } as never)).rejects.toThrow('events.replay(options): unknown option(s) force (known: handler)');

    const unfanned = await bus.transaction((tx) => bus.record(tx, 'order.placed', { n: 1 }));
    await expect(bus.events.replay(unfanned, { handler: 'ledger' })).rejects.toThrow(new BusStateError(`event ${unfanned} is not fanned out yet: the relay delivers it to its handlers`));
    await bus.relayOnce(); // fanned: one job, waiting (no worker runs here)
    const [waiting] = await bus.jobs.forEvent(unfanned);
    await expect(bus.events.replay(unfanned, { handler: 'ledger' })).rejects.toThrow(
      new BusStateError(`handler 'ledger' already has job ${waiting!.id} waiting or running for event ${unfanned}: wait for it, or retry that job once it ends`),
    );
    const err = await bus.events.replay(unfanned, { handler: 'nosuch' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NotFoundError);
    expect((err as Error).message).toBe(`handler "nosuch" not found; known handlers: 'ledger'`);

    const user = await bus.transaction((tx) => bus.record(tx, 'user.created', { email: 'a@b.c' }));
    await bus.relayOnce();
    const notTaken = await bus.events.replay(user, { handler: 'ledger' }).catch((e: unknown) => e);
    expect(notTaken).toBeInstanceOf(OptionsError);
    expect(notTaken).toMatchObject({ field: 'events.replay.handler', message: `invalid option events.replay.handler: handler 'ledger' does not subscribe to 'user.created' (its patterns: order.placed)` });

    const poisoned = await bus.transaction((tx) => bus.record(tx, 'order.placed', { n: 2 }));
    await target.query(`update "${bus.schema}".events set poisoned_at = now() where id = $1`, [poisoned]);
    await expect(bus.events.replay(poisoned, { handler: 'ledger' })).rejects.toBeInstanceOf(BusStateError);

    await expect(bus.events.replay(unfanned, {} as never)).rejects.toMatchObject({ field: 'events.replay(options)' });
    await expect(bus.events.replay(unfanned, { handler: 'ledger', endpointId: 'x' } as never)).rejects.toMatchObject({ field: 'events.replay(options)' });
    await expect(bus.events.replay(unfanned, { handler: '' })).rejects.toMatchObject({ field: 'events.replay.handler' });
    // Nothing was made by any of the refusals: the one job of the relay's, and none for the others.
    expect((await target.query(`select count(*)::int as n from "${bus.schema}".jobs`))[0].n).toBe(1);
  });
});

describeTargets('bulk replay to a handler on $name', (target) => {
  const test = it.skipIf(!target.available);

  test('every fanned event the filter and the handler take gets one job, in batches; waiting ones are skipped', async () => {
    // History recorded before the handler existed: fanned out with no job.
    const v1 = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false } });
    const n = REPLAY_BATCH * 2 + 100;
    const orders = await v1.transaction((tx) => v1.recordMany(tx, Array.from({ length: n }, (_, i) => ({ type: 'order.placed' as const, payload: { n: i }, subject: i % 2 ? 'odd' : 'even' }))));
    await v1.transaction((tx) => v1.recordMany(tx, [{ type: 'user.created', payload: { email: 'a@b.c' } }]));
    while ((await v1.relayOnce()) !== 'none');
    const unfanned = await v1.transaction((tx) => v1.record(tx, 'order.placed', { n: -1 }));

    const v2 = await testBus(target, events, { schema: v1.schema, relay: { enabled: false }, worker: { enabled: false } });
    v2.on('order.*', 'ledger', () => {});
    await v2.start(); // stores the handler
    const first = await v2.events.replay({}, { handler: 'ledger' });
    // Every order (not the user event the handler does not take, not the unfanned one the relay will bring).
    expect(first).toEqual({ handler: 'ledger', replayed: n, skipped: 0 });
    const jobs = await target.query<{ event_id: string }>(`select event_id::text from "${v1.schema}".jobs where target = 'ledger' and state = 'available'`);
    expect(new Set(jobs.map((j) => j.event_id))).toEqual(new Set(orders));
    expect(jobs.map((j) => j.event_id)).not.toContain(unfanned);
    // Again while those jobs wait: nothing new.
    expect(await v2.events.replay({ type: 'order.placed' }, { handler: 'ledger' })).toEqual({ handler: 'ledger', replayed: 0, skipped: n });

    // The filter narrows it: by subject, and by when the events were recorded.
    await target.query(`update "${v1.schema}".jobs set state = 'completed', finalized_at = now()`);
    expect(await v2.events.replay({ subject: 'odd' }, { handler: 'ledger' })).toEqual({ handler: 'ledger', replayed: n / 2, skipped: 0 });
    const hour = 3_600_000;
    expect(await v2.events.replay({ since: new Date(Date.now() + hour) }, { handler: 'ledger' })).toEqual({ handler: 'ledger', replayed: 0, skipped: 0 });
    expect(await v2.events.replay({ until: new Date(Date.now() - hour) }, { handler: 'ledger' })).toEqual({ handler: 'ledger', replayed: 0, skipped: 0 });
    expect(await v2.events.replay({ since: new Date(Date.now() - hour), type: 'order.*' }, { handler: 'ledger' })).toEqual({ handler: 'ledger', replayed: n / 2, skipped: n / 2 });
  });

  test('a bulk replay names what it refuses', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false } });
    bus.on('order.placed', 'ledger', () => {});
    await bus.start();
    for (const key of ['state', 'cursor', 'limit']) {
      const err = await bus.events.replay({ [key]: 'x' } as never, { handler: 'ledger' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidFilterError);
      expect((err as Error).message).toContain(key);
    }
    await expect(bus.events.replay({ since: 'yesterday' }, { handler: 'ledger' })).rejects.toBeInstanceOf(InvalidFilterError);
    await expect(bus.events.replay({}, { handler: 'nosuch' })).rejects.toThrow(`handler "nosuch" not found; known handlers: 'ledger'`);
    await expect(bus.events.replay({}, { endpointId: '0190a0a0-0000-7000-8000-000000000000' } as never)).rejects.toMatchObject({ field: 'events.replay(options)' });
    expect((await target.query(`select count(*)::int as n from "${bus.schema}".jobs`))[0].n).toBe(0);
    // A key it does not know (a typo, the CLI's --trace for traceId) was ignored, and the replay
    // then took every event of the handler's types instead of the few the caller meant.
    await bus.transaction((tx) => bus.record(tx, 'order.placed', { n: 1 }));
    while ((await bus.relayOnce()) !== 'none');
    await target.query(`update "${bus.schema}".jobs set state = 'completed', finalized_at = now()`);
    for (const key of ['typ', 'trace', 'eventId']) {
      const err = await bus.events.replay({ [key]: 'x' } as never, { handler: 'ledger' }).catch((e: unknown) => e);
      expect(err, key).toBeInstanceOf(InvalidFilterError);
      expect((err as InvalidFilterError).parameter).toBe(key);
    }
    expect(await target.query(`select 1 from "${bus.schema}".jobs where state <> 'completed'`)).toEqual([]);
  });
});

describe('replay to a handler from the HTTP API and the panel', () => {
  it.skipIf(!postgresTarget.available)('POST /api/events/:id/replay { handler } makes the job; the event page offers "Run again"', async () => {
    const bus = await testBus(postgresTarget, events);
    let runs = 0;
    bus.on('order.placed', 'ledger', () => void runs++);
    await bus.start();
    let completed = bus.lifecycle.waitFor('job:completed');
    const id = await bus.transaction((tx) => bus.record(tx, 'order.placed', { n: 1 }));
    await completed;
    const s = await serve(createAdminHandler(bus, { auth: { token: TOKEN } }));

    const page = await call(s.url, 'GET', `/events/${id}`, { headers: { cookie: await login(s.url) } });
    expect(page.text).toContain(`action="/api/events/${id}/replay"`);
    expect(page.text).toContain('name="handler" value="ledger"');

    completed = bus.lifecycle.waitFor('job:completed');
    const r = await call(s.url, 'POST', `/api/events/${id}/replay`, { headers: bearer(), body: { handler: 'ledger' } });
    expect(r.status).toBe(200);
    expect(r.json.job).toEqual({ jobId: expect.stringMatching(/^\d+$/), eventId: id, handler: 'ledger' });
    await completed;
    expect(runs).toBe(2);
    const refused = await call(s.url, 'POST', `/api/events/${id}/replay`, { headers: bearer(), body: { handler: 'nosuch' } });
    expect(refused.status).toBe(404);
    expect(refused.json.error.message).toBe(`handler "nosuch" not found; known handlers: 'ledger'`);

    // Many at once: POST /api/events/replay with the events list's filter.
    await postgresTarget.query(`update "${bus.schema}".jobs set state = 'completed', finalized_at = now()`);
    completed = bus.lifecycle.waitFor('job:completed');
    const bulk = await call(s.url, 'POST', '/api/events/replay', { headers: bearer(), body: { handler: 'ledger', type: 'order.*' } });
    expect(bulk.status).toBe(200);
    expect(bulk.json.replay).toEqual({ handler: 'ledger', replayed: 1, skipped: 0 });
    await completed;
    expect(runs).toBe(3);
    const bad = await call(s.url, 'POST', '/api/events/replay', { headers: bearer(), body: { handler: 'ledger', since: 'soon' } });
    expect(bad.status).toBe(400);
    expect(bad.json.error.parameter).toBe('since');
  });
});

describe('replay to a handler, two at once', () => {
  it.skipIf(!postgresTarget.available)('two replays of one event at the same moment make one job; the other is refused', async () => {
    const bus = await testBus(postgresTarget, events, { relay: { enabled: false }, worker: { enabled: false } });
    bus.on('order.placed', 'ledger', () => {});
    await bus.start();
    const id = await bus.transaction((tx) => bus.record(tx, 'order.placed', { n: 1 }));
    // Fanned with its job already completed, as after a delivery.
    await bus.relayOnce();
    await postgresTarget.query(`update "${bus.schema}".jobs set state = 'completed', finalized_at = now() where event_id = $1`, [id]);
    for (let round = 0; round < 5; round++) {
      const outcomes = await Promise.allSettled([bus.events.replay(id, { handler: 'ledger' }), bus.events.replay(id, { handler: 'ledger' })]);
      expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
      expect((outcomes.find((o) => o.status === 'rejected') as PromiseRejectedResult).reason).toBeInstanceOf(BusStateError);
      await postgresTarget.query(`update "${bus.schema}".jobs set state = 'completed', finalized_at = now() where event_id = $1`, [id]);
    }
    expect((await postgresTarget.query(`select count(*)::int as n from "${bus.schema}".jobs where event_id = $1`, [id]))[0].n).toBe(6);
  });
});
