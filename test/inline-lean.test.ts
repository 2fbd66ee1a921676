// The lean inline round: when every handler a round's events route to is an inline target of the
// round with room for them, and nothing else is involved, the round is one claim and one update
// with routing done once per event type. Whenever anything else is involved it must change
// nothing and leave the round to the full statement, in the same transaction. Each case runs the
// same events through both paths, in two schemas, and the stored outcome must be the same.
import pg from 'pg';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { z } from 'zod';
import { PostgresDriver } from '../src/drivers/postgres/driver.js';
import type { FanOutHandOff, FanOutResult } from '../src/driver/types.js';
import { createBus, defineEvents } from '../src/index.js';
import { LEAN_RETRY_ROUNDS } from '../src/relay/relay.js';
import { freshSchema, postgresTarget as target } from './helpers/db.js';

const events = defineEvents({
  'order.created': z.object({ n: z.number() }),
  'order.paid': z.object({ n: z.number() }),
  'user.signed_up': z.object({ n: z.number() }),
});
type Type = keyof typeof events.schemas;

interface Setup {
  handlers: { name: string; patterns: string; coalesce?: boolean; maxAttempts?: number }[];
  endpoints?: string[];
  /** Recorded in this order, one transaction each; a subject for the coalescing cases. */
  record: { type: Type; n: number; subject?: string }[];
  /** Run one plain fan-out after the first `queuedFirst` events (another process, no worker): their jobs wait. */
  queuedFirst?: number;
  handOff: Omit<FanOutHandOff, 'workerId'>;
}

const inline = (target: string, limit: number) => ({ target, limit, leaseMs: 2000, inline: true });

/** One inline round over `setup` in a fresh schema, lean tried or not; what it returned and what it stored. */
async function round(setup: Setup, lean: boolean) {
  const schema = freshSchema('lean');
  const driver = new PostgresDriver({ connection: (target.database() as { postgres: string }).postgres, schema, poolSize: 2, onError: () => {} });
  const bus = createBus({
    database: { driver }, schema, events, relay: { enabled: false }, worker: { enabled: false },
    webhooks: { allowPrivateNetworks: true },
  });
  for (const h of setup.handlers) bus.on(h.patterns as Type, h.name, () => {}, { ...(h.coalesce ? { coalesce: 'subject' as const } : {}), ...(h.maxAttempts ? { maxAttempts: h.maxAttempts } : {}) });
  onTestFinished(async () => {
    await bus.stop();
    await target.query(`drop schema if exists "${schema}" cascade`);
  });
  await bus.migrate();
  await bus.start(); // registers the handler rows the fan-out routes by
  for (const pattern of setup.endpoints ?? []) await bus.endpoints.create({ url: 'http://127.0.0.1:9/hook', eventTypes: [pattern] });
  let recorded = 0;
  for (const e of setup.record) {
    await bus.transaction((tx) => bus.record(tx, e.type, { n: e.n }, e.subject ? { subject: e.subject } : {}));
    if (++recorded === setup.queuedFirst) await driver.executor.eventFanOut(driver, { limit: 100, now: null });
  }
  const result: FanOutResult = await driver.transaction((q) => driver.executor.eventFanOut(q, {
    limit: 100, now: null, handOff: { workerId: 'worker-w', ...setup.handOff }, inlineIdleLimitMs: 10_000, lean,
  }));
  const n = (id: string) => `(select (payload->>'n')::int from "${schema}".events where id = ${id})`;
  const stored = {
    events: await target.query(`select (payload->>'n')::int as n, fanned_out_at is not null as fanned, delivered_inline from "${schema}".events order by id`),
    jobs: await target.query(`select ${n('event_id')} as n, kind, state, coalesced from "${schema}".jobs order by 1, kind, target`),
  };
  const returned = {
    fanned: result.eventIds.length,
    jobs: result.jobs,
    inline: result.inline.map((j) => [(j.event.payload as { n: number }).n, j.target, j.coalesced, j.maxAttempts, j.leaseMs, j.attempt]).sort(),
    handedOff: result.handedOff.map((j) => [(j.event.payload as { n: number }).n, j.target]).sort(),
  };
  return { lean: result.lean === true, returned, stored, result };
}

/** The same round both ways: the lean path must store and return exactly what the full one does. */
async function both(setup: Setup) {
  const full = await round(setup, false);
  const lean = await round(setup, true);
  expect(full.lean).toBe(false);
  expect(lean.returned).toEqual(full.returned);
  expect(lean.stored).toEqual(full.stored);
  return { full, lean };
}

const three = (type: Type = 'order.created') => [1, 2, 3].map((n) => ({ type, n }));

/**
 * A migrated bus in a fresh schema whose relay rounds come only from relayOnce (inline delivery
 * on), on a driver with `poolSize` connections, and a pg client of the test's own (connected by
 * the caller). All are closed and the schema dropped when the test ends.
 */
async function relayOnceBus(poolSize: number) {
  const schema = freshSchema('lean');
  const url = (target.database() as { postgres: string }).postgres;
  const driver = new PostgresDriver({ connection: url, schema, poolSize, onError: () => {} });
  const bus = createBus({
    database: { driver }, schema, events, instanceId: 'solo', webhooks: { allowPrivateNetworks: true },
    relay: { enabled: false, inlineMs: 20 },
  });
  const client = new pg.Client({ connectionString: url });
  onTestFinished(async () => {
    await bus.stop();
    await client.end();
    await target.query(`drop schema if exists "${schema}" cascade`);
  });
  await bus.migrate();
  return { schema, driver, bus, client };
}

describe.skipIf(!target.available)('the lean inline round on postgres', () => {
  it('plain inline handlers with room: the lean round applies and delivers every event inline, with no job row', async () => {
    const { lean } = await both({
      handlers: [{ name: 'ship', patterns: 'order.created', maxAttempts: 7 }, { name: 'bill', patterns: 'order.*' }],
      record: [...three(), { type: 'user.signed_up', n: 4 }],
      handOff: { targets: [inline('ship', 100), inline('bill', 100)], limit: 100 },
    });
    expect(lean.lean).toBe(true);
    expect(lean.stored.jobs).toEqual([]);
    // The event no handler takes is fanned too, delivered to nobody.
    expect(lean.stored.events).toEqual([
      { n: 1, fanned: true, delivered_inline: ['bill', 'ship'] },
      { n: 2, fanned: true, delivered_inline: ['bill', 'ship'] },
      { n: 3, fanned: true, delivered_inline: ['bill', 'ship'] },
      { n: 4, fanned: true, delivered_inline: null },
    ]);
    expect(lean.returned.inline.map(([n, t]) => `${n}${t}`)).toEqual(['1bill', '1ship', '2bill', '2ship', '3bill', '3ship']);
    // The handler's own attempts, the worker's lease, attempt 1; ids from the jobs sequence, distinct.
    expect(lean.returned.inline[1]!.slice(3)).toEqual([7, 2000, 1]);
    expect(new Set(lean.result.inline.map((j) => j.id)).size).toBe(6);
    expect(lean.result.eventIds).toHaveLength(4);
  });

  it('a webhook endpoint for the events: the full round runs, with the webhook jobs', async () => {
    const { lean } = await both({
      handlers: [{ name: 'ship', patterns: 'order.created' }],
      endpoints: ['order.*'],
      record: three(),
      handOff: { targets: [inline('ship', 100)], limit: 100 },
    });
    expect(lean.lean).toBe(false);
    expect(lean.stored.jobs.map((j) => j.kind)).toEqual(['webhook', 'webhook', 'webhook']);
  });

  it('an endpoint for other events only does not stop the lean round', async () => {
    const { lean } = await both({
      handlers: [{ name: 'ship', patterns: 'order.created' }],
      endpoints: ['user.*'],
      record: three(),
      handOff: { targets: [inline('ship', 100)], limit: 100 },
    });
    expect(lean.lean).toBe(true);
  });

  it('a coalescing handler: the full round runs and coalesces', async () => {
    const { lean } = await both({
      handlers: [{ name: 'sync', patterns: 'order.created', coalesce: true }],
      record: [{ type: 'order.created', n: 1, subject: 'o-1' }, { type: 'order.created', n: 2, subject: 'o-1' }],
      handOff: { targets: [inline('sync', 100)], limit: 100 },
    });
    expect(lean.lean).toBe(false);
    expect(lean.returned.inline.map(([n, , coalesced]) => [n, coalesced])).toEqual([[2, 2]]);
  });

  it('a handler this round does not run inline (another process\'s): the full round runs, and queues its jobs', async () => {
    const { lean } = await both({
      handlers: [{ name: 'ship', patterns: 'order.created' }, { name: 'elsewhere', patterns: 'order.created' }],
      record: three(),
      handOff: { targets: [inline('ship', 100)], limit: 100 },
    });
    expect(lean.lean).toBe(false);
    expect(lean.stored.jobs.map((j) => j.state)).toEqual(['available', 'available', 'available']);
  });

  it('less room for a handler than its events, or in all: the full round runs and queues the rest', async () => {
    const perHandler = await both({
      handlers: [{ name: 'ship', patterns: 'order.created' }],
      record: three(),
      handOff: { targets: [inline('ship', 2)], limit: 100 },
    });
    expect(perHandler.lean.lean).toBe(false);
    expect(perHandler.lean.returned.inline.map(([n]) => n)).toEqual([1, 2]);
    const inAll = await both({
      handlers: [{ name: 'ship', patterns: 'order.created' }, { name: 'bill', patterns: 'order.created' }],
      record: three(),
      handOff: { targets: [inline('ship', 100), inline('bill', 100)], limit: 4 },
    });
    expect(inAll.lean.lean).toBe(false);
    expect(inAll.lean.returned.inline).toHaveLength(4);
  });

  it('a handler of two event types counts both against its room', async () => {
    const { lean } = await both({
      handlers: [{ name: 'bill', patterns: 'order.*' }],
      record: [...three('order.created'), ...three('order.paid')],
      handOff: { targets: [inline('bill', 4)], limit: 100 },
    });
    expect(lean.lean).toBe(false);
    expect(lean.returned.inline).toHaveLength(4);
    expect(lean.stored.jobs.map((j) => j.state)).toEqual(['available', 'available']);
  });

  it('a job of the handler waiting in the queue: the full round runs, and nothing overtakes it', async () => {
    const { lean } = await both({
      handlers: [{ name: 'ship', patterns: 'order.created' }],
      record: three(),
      queuedFirst: 1,
      handOff: { targets: [inline('ship', 100)], limit: 100 },
    });
    expect(lean.lean).toBe(false);
    expect(lean.returned.inline).toEqual([]);
    expect(lean.stored.jobs.map((j) => [j.n, j.state])).toEqual([[1, 'available'], [2, 'available'], [3, 'available']]);
  });

  it('after a round the lean statement did not apply to, the relay goes straight to the full one for a while', async () => {
    const { driver, bus, client, schema } = await relayOnceBus(4);
    bus.on('order.created', 'ship', () => {});
    await bus.endpoints.create({ url: 'http://127.0.0.1:9/hook', eventTypes: ['order.*'] });
    await client.connect();
    const tried: boolean[] = [];
    const fanOut = driver.executor.eventFanOut.bind(driver.executor);
    vi.spyOn(driver.executor, 'eventFanOut').mockImplementation(async (q, p) => {
      if (p.handOff?.targets.some((t) => t.inline)) tried.push(p.lean === true);
      return fanOut(q, p);
    });
    await bus.start();
    for (let n = 0; n < LEAN_RETRY_ROUNDS + 2; n++) {
      await client.query('begin');
      await bus.record(client, 'order.created', { n });
      await client.query('commit');
      await bus.relayOnce();
    }
    // Every round of these events had a webhook to make: one lean try, then the full statement only.
    expect(tried.slice(0, LEAN_RETRY_ROUNDS + 2)).toEqual([true, ...Array(LEAN_RETRY_ROUNDS).fill(false), true]);
    const [{ webhooks }] = await target.query(`select count(*)::int as webhooks from "${schema}".jobs where kind = 'webhook'`);
    expect(webhooks).toBe(LEAN_RETRY_ROUNDS + 2);
  });

  it('a round\'s statements are planned once per connection, not at every round, even with statistics', async () => {
    // With the events table analyzed, the plan cache judged the lean statement's generic plan
    // dearer than a custom one (the round's limit is a parameter) and planned it again at every
    // round. One pool connection: the rounds and the look at its prepared statements share it.
    const { driver, bus, client, schema } = await relayOnceBus(1);
    const delivered: number[] = [];
    bus.on('order.created', 'ship', (e) => {
      delivered.push(e.payload.n);
    });
    // Analyzed while 20,000 events waited (a backlog), then fanned: the generic plan's guess at the
    // round's rows is then dear enough that a custom plan was made at every round, not the first five.
    await target.query(`insert into "${schema}".events (id, type, payload)
      select gen_random_uuid(), 'order.created', '{"n":-1}' from generate_series(1, 20000)`);
    await target.query(`analyze "${schema}".events`);
    await target.query(`update "${schema}".events set fanned_out_at = now()`);
    await client.connect();
    await bus.start();
    const rounds = 8;
    for (let n = 0; n < rounds; n++) {
      await client.query('begin');
      await bus.record(client, 'order.created', { n });
      await client.query('commit');
      await bus.relayOnce();
    }
    expect(delivered).toEqual([...Array(rounds).keys()]);
    const [plans] = await driver.transaction(async (q) => (await q.query<{ generic: number; custom: number }>(
      `select generic_plans::int as generic, custom_plans::int as custom from pg_prepared_statements where statement like '%delivered_inline = (select n.names%'`,
    )).rows);
    expect(plans).toEqual({ generic: rounds, custom: 0 });
  });
});
