// bus.events.list and bus.jobs.list: filters, keyset pagination over UUIDv7 ids, typed errors for
// bad filters, and the operator discard.
import { expect, it } from 'vitest';
import { z } from 'zod';
import { defineEvents, InvalidFilterError } from '../src/index.js';
import { describeTargets, testBus } from './helpers/db.js';

const events = defineEvents({
  'order.created': z.object({ orderNo: z.string() }),
  'order.paid': z.object({ orderNo: z.string() }),
  'user.joined': z.object({ name: z.string() }),
});

describeTargets('admin lists on $name', (target) => {
  const test = it.skipIf(!target.available);

  test('events: filter by type pattern, subject, trace id, state and time; pages never overlap', async () => {
    const bus = await testBus(target, events);
    const ids = await bus.transaction(async (tx) => [
      ...await bus.recordMany(tx, Array.from({ length: 7 }, (_, i) => ({ type: 'order.created' as const, payload: { orderNo: `O${i}` }, subject: `O${i}` }))),
      await bus.record(tx, 'order.paid', { orderNo: 'O1' }, { subject: 'O1', traceId: 'trace-abc' }),
      await bus.record(tx, 'user.joined', { name: 'ann' }),
    ]);
    const page1 = await bus.events.list({ type: 'order.*', limit: 3 });
    expect(page1.items.map((e) => e.id)).toEqual([ids[7], ids[6], ids[5]]);
    expect(page1.nextCursor).toBe(ids[5]);
    const seen = [...page1.items];
    let cursor = page1.nextCursor;
    while (cursor) {
      const p = await bus.events.list({ type: 'order.*', limit: 3, cursor });
      seen.push(...p.items);
      cursor = p.nextCursor;
    }
    expect(seen.map((e) => e.id)).toEqual(ids.slice(0, 8).reverse());
    expect((await bus.events.list({ subject: 'O1' })).items.map((e) => e.type)).toEqual(['order.paid', 'order.created']);
    expect((await bus.events.list({ traceId: 'trace-abc' })).items.map((e) => e.id)).toEqual([ids[7]]);
    expect((await bus.events.list({ type: 'user.joined' })).items[0]).toMatchObject({ state: 'unfanned', payloadPreview: '{"name": "ann"}' });
    expect((await bus.events.list({ state: 'fanned' })).items).toEqual([]);
    await bus.relayOnce();
    expect((await bus.events.list({ state: 'fanned' })).items).toHaveLength(9);
    expect((await bus.events.list({ state: 'unfanned' })).items).toHaveLength(0);
    expect((await bus.events.list({ since: new Date(Date.now() + 60_000) })).items).toHaveLength(0);
    expect((await bus.events.list({ since: new Date(Date.now() - 60_000), until: new Date(Date.now() + 60_000) })).items).toHaveLength(9);
    expect((await bus.events.list({ until: new Date(Date.now() - 60_000) })).items).toHaveLength(0);
  });

  test('bad event filters are InvalidFilterError naming the parameter', async () => {
    const bus = await testBus(target, events);
    const bad: [object, string][] = [
      [{ state: 'done' }, 'state'], [{ cursor: 'nope' }, 'cursor'], [{ limit: 0 }, 'limit'], [{ limit: 501 }, 'limit'],
      [{ since: 'yesterday' }, 'since'], [{ type: 'a b' }, 'type'],
      [{ since: '2025-02-01T00:00:00Z', until: '2025-01-01T00:00:00Z' }, 'until'],
      // Days the month does not have: Date.parse rolled them into the next month.
      [{ since: '2025-02-30', until: '2025-03-05' }, 'since'], [{ until: '2025-04-31T00:00:00Z' }, 'until'],
      [{ since: '2025-02-29' }, 'since'],
    ];
    for (const [filter, parameter] of bad) {
      const err = await bus.events.list(filter as never).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidFilterError);
      expect(err).toMatchObject({ parameter, code: 'ERR_INVALID_FILTER' });
    }
    expect((await bus.events.list({ since: '2024-02-29', until: '2024-12-31T23:59:59+01:00' })).items).toEqual([]);
    await expect(bus.jobs.list({ state: 'gone' as never })).rejects.toMatchObject({ parameter: 'state' });
    await expect(bus.jobs.list({ eventId: 'x' })).rejects.toMatchObject({ parameter: 'eventId' });
    await expect(bus.jobs.list({ cursor: '-1' })).rejects.toMatchObject({ parameter: 'cursor' });
  });

  // A misspelt key was ignored, and the call answered an unfiltered page as if it were the filtered one.
  test('a key a list filter does not take is InvalidFilterError naming it, not an unfiltered page', async () => {
    const bus = await testBus(target, events);
    await bus.transaction((tx) => bus.record(tx, 'user.joined', { name: 'ann' }));
    const typo = await bus.events.list({ typ: 'order.paid' } as never).catch((e: unknown) => e);
    expect(typo).toBeInstanceOf(InvalidFilterError);
    expect(typo).toMatchObject({ parameter: 'typ', message: 'invalid filter typ: is not an events list filter: give type, subject, traceId, state, since, until, cursor or limit' });
    await expect(bus.events.list({ type: 'order.paid', traceID: 'x' } as never)).rejects.toMatchObject({ parameter: 'traceID' });
    const jobTypo = await bus.jobs.list({ handlr: 'a' } as never).catch((e: unknown) => e);
    expect(jobTypo).toBeInstanceOf(InvalidFilterError);
    expect(jobTypo).toMatchObject({ parameter: 'handlr', message: 'invalid filter handlr: is not a jobs list filter: give state, kind, handler, eventId, cursor or limit' });
    // Known keys left undefined (as the CLI passes its unset flags) are no filter, and no error.
    expect((await bus.events.list({ type: undefined, subject: undefined })).items).toHaveLength(1);
    expect((await bus.jobs.list({ handler: undefined })).items).toEqual([]);
  });

  test('jobs: by state and handler with pagination; discard moves only waiting jobs', async () => {
    const bus = await testBus(target, events);
    bus.on('order.created', 'mailer', () => {});
    bus.on('order.*', 'indexer', () => {});
    await bus.start(); // registers the handlers; the worker is not needed, jobs stay available
    await bus.stop();
    const bus2 = await testBus(target, events, { schema: bus.schema, worker: { enabled: false }, relay: { enabled: false } });
    await bus2.transaction((tx) => bus2.recordMany(tx, [1, 2, 3].map((i) => ({ type: 'order.created' as const, payload: { orderNo: `O${i}` } }))));
    await bus2.relayOnce();
    const mailer = await bus2.jobs.list({ handler: 'mailer', state: 'available', limit: 2 });
    expect(mailer.items).toHaveLength(2);
    expect(mailer.items[0]).toMatchObject({ target: 'mailer', eventType: 'order.created', state: 'available' });
    const rest = await bus2.jobs.list({ handler: 'mailer', cursor: mailer.nextCursor! });
    expect(rest.items).toHaveLength(1);
    expect(rest.nextCursor).toBeNull();
    expect((await bus2.jobs.list({ kind: 'handler' })).items).toHaveLength(6);
    // Nothing makes a forward job yet: the filter is refused (and the type leaves it out), not an empty list.
    await expect(bus2.jobs.list({ kind: 'forward' as never })).rejects.toMatchObject({ parameter: 'kind', message: expect.stringContaining('forwarding to a message broker is not built yet') });
    const moved = await bus2.jobs.discard([mailer.items[0]!.id]);
    expect(moved).toEqual([mailer.items[0]!.id]);
    const discarded = await bus2.jobs.list({ state: 'discarded' });
    expect(discarded.items.map((j) => j.id)).toEqual(moved);
    expect(discarded.items[0]!.errors.at(-1)).toMatchObject({ name: 'DiscardedByOperator', message: 'discarded by an operator (bus.jobs.discard: the API, the panel or the CLI)' });
    expect(await bus2.jobs.discard(moved)).toEqual([]); // already discarded: nothing moves
    await expect(bus2.jobs.discard(['abc'])).rejects.toMatchObject({ parameter: 'ids' });
    expect(await bus2.driver.admin.handlerNames()).toEqual(['indexer', 'mailer']);
  });
});
