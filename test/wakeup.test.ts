// The wake-up NOTIFY that tells other processes about a commit is sent on the LISTEN connection
// (or, in a process that does not listen, on one of its own), so it never takes (or waits for) a
// connection of the application's pool.
import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { z } from 'zod';
import { PostgresDriver } from '../src/drivers/postgres/driver.js';
import { notifyChannel } from '../src/drivers/postgres/common.js';
import { wakeupNotify } from '../src/drivers/postgres/sql.js';
import { createBus, defineEvents, OptionsError, type Bus } from '../src/index.js';
import { freshSchema, PG_URL, postgresTarget, testBus } from './helpers/db.js';

const events = defineEvents({ 'order.created': z.object({ orderNo: z.string() }) });

/** Relay polls 10 minutes apart: a relay that runs a round within seconds was woken. */
const quiet = { minPollMs: 600_000, maxPollMs: 600_000 };

/** Resolves when `bus`'s relay has fanned out event `id`. */
const fannedOut = (bus: Bus<any>, id: string) =>
  new Promise<void>((resolve) => bus.lifecycle.on('relay:batch:fanned', (b) => void (b.eventIds.includes(id) && resolve())));

/**
 * Whether a commit of `recorder` (whose relay is off) wakes the relay of `listener` (relay
 * `quiet`, not started yet), on another connection: only its NOTIFY can, within 5 s.
 */
async function wakes(recorder: Bus<any>, listener: Bus<any>): Promise<boolean> {
  // The listener's first round, at start, fans this one out; its relay then sleeps its 10 minutes.
  const first = await recorder.transaction((tx) => recorder.record(tx, 'order.created', { orderNo: 'first' }));
  const firstFanned = fannedOut(listener, first);
  await listener.start();
  await firstFanned;
  const second = await recorder.transaction((tx) => recorder.record(tx, 'order.created', { orderNo: 'second' }));
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    fannedOut(listener, second).then(() => true),
    new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), 5000))),
  ]);
  clearTimeout(timer);
  return outcome;
}

/** A bus whose pool has one connection, no relay or worker, and at most one wake-up per 50 ms. */
const oneConnectionBus = (schema: string) => testBus(postgresTarget, events, {
  schema,
  database: { postgres: PG_URL, poolSize: 1 },
  relay: { enabled: false },
  worker: { enabled: false },
  notifyDebounceMs: 50,
});

describe.skipIf(!postgresTarget.available)('wake-up notifications on postgres', () => {
  it('go out while every pool connection is held by the application', async () => {
    const schema = freshSchema();
    const bus = await oneConnectionBus(schema);
    await bus.start();

    const other = new pg.Client({ connectionString: PG_URL });
    await other.connect();
    onTestFinished(() => other.end());
    await other.query(`LISTEN "rea_${schema}"`);
    const notes: string[] = [];
    let second!: (payload: string) => void;
    const received = new Promise<string>((resolve) => (second = resolve));
    const first = new Promise<void>((resolve) => other.on('notification', (m) => {
      notes.push(m.payload ?? '');
      if (notes.length === 1) resolve();
      if (notes.length === 2) second(m.payload ?? '');
    }));

    // A first commit after a quiet spell is notified at once; a second one within the 50 ms
    // window after it waits for the window's end, and meanwhile the application takes the
    // pool's only connection.
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'A0' }));
    await first;
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'A1' }));
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let holding = false;
    const holder = bus.transaction(async () => {
      holding = true;
      await held;
    });
    try {
      const outcome = await Promise.race([received, new Promise<string>((r) => setTimeout(() => r('not received'), 2000))]);
      expect(holding).toBe(true);
      expect(outcome).toBe('e');
    } finally {
      release();
      await holder;
    }
  });

  it('from a process that only records go out on a connection of their own, not the pool, closed with the bus', async () => {
    const schema = freshSchema();
    const bus = await oneConnectionBus(schema);
    // Never started: no LISTEN connection, as in a web process that records and runs no relay.
    const other = new pg.Client({ connectionString: PG_URL });
    await other.connect();
    onTestFinished(() => other.end());
    await other.query(`LISTEN "rea_${schema}"`);
    const notes: pg.Notification[] = [];
    let second!: (n: pg.Notification) => void;
    const received = new Promise<pg.Notification>((resolve) => (second = resolve));
    const first = new Promise<void>((resolve) => other.on('notification', (m) => {
      notes.push(m);
      if (notes.length === 1) resolve();
      if (notes.length === 2) second(m);
    }));

    // As above: the second commit's wake-up waits for the window's end, while the pool is held.
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'A0' }));
    await first;
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'A1' }));
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const holder = bus.transaction(() => held); // the pool's only connection, until the NOTIFY is in
    let sender: number;
    try {
      const outcome = await Promise.race([received, new Promise<'not received'>((r) => setTimeout(() => r('not received'), 2000))]);
      expect(outcome).not.toBe('not received');
      const n = outcome as pg.Notification;
      expect(n.payload).toBe('e');
      sender = n.processId;
      const { rows } = await other.query('select application_name from pg_stat_activity where pid = $1', [sender]);
      expect(rows).toEqual([{ application_name: 'rea-notify' }]);
    } finally {
      release();
      await holder;
    }
    await bus.stop();
    // stop() ends that connection too; its backend leaves pg_stat_activity once it has exited.
    const deadline = Date.now() + 2000;
    let left = 1;
    while (left > 0 && Date.now() < deadline) {
      left = (await other.query('select count(*)::int as n from pg_stat_activity where pid = $1', [sender])).rows[0].n;
      if (left > 0) await new Promise((r) => setTimeout(r, 20));
    }
    expect(left).toBe(0);
  });

  it('go out at once after a quiet spell; the commits inside the window after one share a single wake-up at its end', async () => {
    const schema = freshSchema();
    const bus = await testBus(postgresTarget, events, {
      schema, relay: { enabled: false }, worker: { enabled: false }, notifyDebounceMs: 1000,
    });
    const other = new pg.Client({ connectionString: PG_URL });
    await other.connect();
    onTestFinished(() => other.end());
    await other.query(`LISTEN "rea_${schema}"`);
    const arrivals: number[] = [];
    let gotTwo!: () => void;
    const two = new Promise<void>((r) => (gotTwo = r));
    other.on('notification', () => {
      arrivals.push(performance.now());
      if (arrivals.length === 2) gotTwo();
    });

    const committed = performance.now();
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'B1' }));
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'B2' }));
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'B3' }));
    await two;
    await new Promise((r) => setTimeout(r, 300)); // a third wake-up would be here by now
    expect(arrivals).toHaveLength(2);
    // The first did not wait for the 1 s window; B2 and B3 waited for its end, together.
    expect(arrivals[0]! - committed).toBeLessThan(500);
    expect(arrivals[1]! - arrivals[0]!).toBeGreaterThan(900);
  });

  it('skip the WAL flush in their own transaction and leave the session as it was (safe behind a transaction pooler)', async () => {
    const sender = new pg.Client({ connectionString: PG_URL });
    await sender.connect();
    onTestFinished(() => sender.end());
    const other = new pg.Client({ connectionString: PG_URL });
    await other.connect();
    onTestFinished(() => other.end());
    await other.query('LISTEN rea_wake_async');
    const received = new Promise<pg.Notification>((resolve) => other.on('notification', resolve));

    const results = (await sender.query(wakeupNotify(pg.escapeLiteral('rea_wake_async'), pg.escapeLiteral("it's")))) as unknown as pg.QueryResult[];
    expect(results.map((r) => r.command)).toEqual(['BEGIN', 'SET', 'SELECT', 'COMMIT']);
    expect((await received).payload).toBe("it's");
    expect((await sender.query('show synchronous_commit')).rows[0].synchronous_commit).toBe('on');
  });

  it('wake-ups sent at once go out one after another on the LISTEN connection, each once', async () => {
    const schema = freshSchema();
    const driver = new PostgresDriver({ connection: PG_URL, schema, poolSize: 2, onError: () => {} });
    onTestFinished(() => driver.close());
    const stopListening = await driver.listen('rea_wake_test', () => {});
    onTestFinished(() => stopListening());

    const other = new pg.Client({ connectionString: PG_URL });
    await other.connect();
    onTestFinished(() => other.end());
    await other.query('LISTEN rea_wake_test');
    const got: string[] = [];
    const allThree = new Promise<void>((resolve) => other.on('notification', (m) => {
      got.push(m.payload ?? '');
      if (new Set(got).size === 3) resolve();
    }));
    // pg warns (and pg 9 throws) when a client is given a query while one runs.
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on('warning', onWarning);
    onTestFinished(() => void process.off('warning', onWarning));

    await Promise.all(['e', 'j', 'e', 'x', 'j', 'e'].map((p) => driver.notify('rea_wake_test', p)));
    await allThree;
    expect(warnings.filter((m) => m.includes('already executing a query'))).toEqual([]);
    expect([...new Set(got)].sort()).toEqual(['e', 'j', 'x']);
    // The first goes at once; the rest wait for it and are sent once per payload.
    expect(got.length).toBeLessThanOrEqual(4);
  });

  it('a wake-up in flight when the LISTEN connection comes up (and retires the wake-up connection) still goes out', async () => {
    const other = new pg.Client({ connectionString: PG_URL });
    await other.connect();
    onTestFinished(() => other.end());
    await other.query('LISTEN rea_wake_handover');
    const got = new Set<string>();
    other.on('notification', (m) => got.add(m.payload ?? ''));

    // Each round: a process that recorded first (so it has a wake-up connection) starts listening
    // while wake-ups keep going out. Before the fix, nearly every round lost one to "Connection terminated".
    const errors: string[] = [];
    const sent: string[] = [];
    for (let round = 0; round < 10; round++) {
      const driver = new PostgresDriver({ connection: PG_URL, schema: freshSchema(), poolSize: 1, onError: () => {} });
      await driver.notify('rea_wake_handover', `r${round}-first`);
      sent.push(`r${round}-first`);
      const listening = driver.listen('rea_wake_handover', () => {});
      const sends: Promise<void>[] = [];
      for (let k = 0; k < 20; k++) {
        sent.push(`r${round}-${k}`);
        sends.push(driver.notify('rea_wake_handover', `r${round}-${k}`).catch((err: Error) => void errors.push(err.message)));
        await new Promise((r) => setImmediate(r));
      }
      await listening;
      await Promise.all(sends);
      await driver.close();
    }
    expect(errors).toEqual([]);
    // Every wake-up reached the other session (NOTIFY is delivered in commit order, so a last one
    // sent on a fresh connection settles the wait).
    await other.query(`select pg_notify('rea_wake_handover', 'end')`);
    await new Promise<void>((resolve) => (got.has('end') ? resolve() : other.on('notification', (m) => m.payload === 'end' && resolve())));
    expect(sent.filter((p) => !got.has(p))).toEqual([]);
  });

  it('a process that runs a relay wakes it, not every other process\'s; their workers hear of the jobs it made', async () => {
    const schema = freshSchema();
    const listener = new pg.Client({ connectionString: PG_URL });
    await listener.connect();
    onTestFinished(() => listener.end());
    await listener.query(`LISTEN "rea_${schema}"`);
    const notes: string[] = [];
    listener.on('notification', (m) => notes.push(m.payload ?? ''));

    // Process A records and runs the relay; process B runs the handler and no relay.
    const a = await testBus(postgresTarget, events, { schema, database: { postgres: PG_URL }, notifyDebounceMs: 0 });
    const b = await testBus(postgresTarget, events, { schema, database: { postgres: PG_URL }, relay: { enabled: false }, notifyDebounceMs: 0 });
    const handled: string[] = [];
    let done!: () => void;
    const allHandled = new Promise<void>((r) => (done = r));
    b.on('order.created', 'ship', async (e) => {
      handled.push(e.payload.orderNo);
      if (handled.length === 3) done();
    });
    await a.start();
    await b.start();

    for (const orderNo of ['A1', 'A2', 'A3']) await a.transaction((tx) => a.record(tx, 'order.created', { orderNo }));
    await allHandled;
    // Every notification sent before this one has reached the listener by the time it does.
    await listener.query(`select pg_notify('rea_${schema}', 'fence')`);
    await new Promise<void>((resolve) => {
      const look = () => (notes.includes('fence') ? resolve() : setTimeout(look, 5));
      look();
    });
    expect(handled.sort()).toEqual(['A1', 'A2', 'A3']);
    expect(notes).toContain('j');
    expect(notes).not.toContain('e');
  });

  it('a process is not woken by its own wake-ups, only by other sessions\' ones', async () => {
    const schema = freshSchema();
    const driver = new PostgresDriver({ connection: PG_URL, schema, poolSize: 2, onError: () => {} });
    onTestFinished(() => driver.close());
    const heard: string[] = [];
    let heardOther!: () => void;
    const otherHeard = new Promise<void>((r) => (heardOther = r));
    const stopListening = await driver.listen('rea_self_test', (p) => {
      heard.push(p);
      if (p === 'from-other') heardOther();
    });
    onTestFinished(() => stopListening());

    await driver.notify('rea_self_test', 'from-self');
    const other = new pg.Client({ connectionString: PG_URL });
    await other.connect();
    onTestFinished(() => other.end());
    await other.query(`select pg_notify('rea_self_test', 'from-other')`);
    await otherHeard;
    // Notifications arrive in commit order, so 'from-self' would have come first.
    expect(heard.filter((p) => p !== 'reconnected')).toEqual(['from-other']);
  });
});

describe.skipIf(!postgresTarget.available)('wake-ups between a bus given a driver and one given a URL, on postgres', () => {
  /** A bus on `schema` through a PostgresDriver of the application's own, given no `schema` option. */
  function driverBus(schema: string, relay: { enabled: false } | typeof quiet) {
    const driver = new PostgresDriver({ connection: PG_URL, schema, poolSize: 2, onError: () => {} });
    const bus = createBus({ database: { driver }, events, relay, worker: { enabled: false }, notifyDebounceMs: 0 });
    onTestFinished(() => bus.stop({ timeoutMs: 2000 }));
    return bus;
  }

  it('a bus given a driver wakes one given a URL and the same schema, and is woken by it', async () => {
    const schema = freshSchema();
    const byUrl = await testBus(postgresTarget, events, { schema, database: { postgres: PG_URL }, relay: quiet, worker: { enabled: false }, notifyDebounceMs: 0 });
    const own = driverBus(schema, { enabled: false });
    expect(await wakes(own, byUrl)).toBe(true);

    const schema2 = freshSchema();
    const byUrl2 = await testBus(postgresTarget, events, { schema: schema2, database: { postgres: PG_URL }, relay: { enabled: false }, worker: { enabled: false }, notifyDebounceMs: 0 });
    const own2 = driverBus(schema2, quiet);
    expect(await wakes(byUrl2, own2)).toBe(true);
    // It is on the driver's schema, and says so.
    expect([own.schema, own2.schema]).toEqual([schema, schema2]);
  });

  it('a schema option other than the driver\'s is refused, naming both; a driver with no schema too', async () => {
    const driver = new PostgresDriver({ connection: PG_URL, schema: 'app_events', poolSize: 1, onError: () => {} });
    onTestFinished(() => driver.close());
    let caught: unknown;
    try {
      createBus({ database: { driver }, schema: 'rea', events });
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(OptionsError);
    expect(caught).toMatchObject({ field: 'schema' });
    expect((caught as Error).message).toMatch(/'rea'.*'app_events'/);
    expect(createBus({ database: { driver }, schema: 'app_events', events }).schema).toBe('app_events');
    const nameless = { ...driver, schema: undefined } as unknown as PostgresDriver;
    expect(() => createBus({ database: { driver: nameless }, events })).toThrow(new OptionsError('database.driver', 'has no schema (a Driver names the schema it works on)'));
  });
});

describe('the wake-up channel', () => {
  it('is rea_<schema>, or for a schema too long for that, a name within PostgreSQL\'s 63 bytes that tells schemas apart', () => {
    expect(notifyChannel('rea')).toBe('rea_rea');
    const longest = 'a'.repeat(59);
    expect(notifyChannel(longest)).toBe(`rea_${longest}`);
    const names = ['b', 'c'].map((end) => notifyChannel(`${'a'.repeat(62)}${end}`));
    for (const name of names) expect(Buffer.byteLength(name)).toBeLessThanOrEqual(63);
    expect(names[0]).not.toBe(names[1]);
    // A driver's own schema may hold multi-byte characters: none is cut in two.
    expect(notifyChannel('é'.repeat(40))).toMatch(/^rea_(é){25}_[0-9a-f]{8}$/);
  });
});

describe.skipIf(!postgresTarget.available)('wake-ups on a schema of 63 characters, on postgres', () => {
  it('a commit of one bus wakes the relay of another', async () => {
    const schema = `${freshSchema()}_`.padEnd(63, 'x');
    const recorder = await testBus(postgresTarget, events, { schema, relay: { enabled: false }, worker: { enabled: false }, notifyDebounceMs: 0 });
    const listener = await testBus(postgresTarget, events, { schema, relay: quiet, worker: { enabled: false }, notifyDebounceMs: 0 });
    expect(await wakes(recorder, listener)).toBe(true);
  });
});

describe.skipIf(!postgresTarget.available)('the LISTEN connection on postgres', () => {
  it('a reconnection still on its way when the driver closes is ended, not left listening', async () => {
    const channel = `rea_reconnect_${freshSchema()}`;
    const errors: string[] = [];
    const driver = new PostgresDriver({ connection: PG_URL, schema: freshSchema(), poolSize: 1, onError: (err) => void errors.push(err.message) });
    // Hold the second connection (the reconnection) at its connect() until the driver has closed.
    let opened = 0;
    let reconnecting!: () => void;
    const reconnectStarted = new Promise<void>((r) => (reconnecting = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let listened!: () => void;
    const reconnectListened = new Promise<void>((r) => (listened = r));
    const own = driver as unknown as { ownClient(name: string): pg.Client };
    const ownClient = own.ownClient.bind(driver);
    own.ownClient = (name: string) => {
      const c = ownClient(name);
      if (name === 'rea-listen' && ++opened === 2) {
        const connect = c.connect.bind(c);
        c.connect = (async () => {
          reconnecting();
          await gate;
          return connect();
        }) as typeof c.connect;
        const query = c.query.bind(c) as (text: string) => Promise<unknown>;
        c.query = (async (text: string) => {
          const result = await query(text);
          if (text.startsWith('LISTEN')) listened();
          return result;
        }) as typeof c.query;
      }
      return c;
    };
    await driver.listen(channel, () => {});
    const listening = async () => (await postgresTarget.query(`select pid from pg_stat_activity where query = $1`, [`LISTEN "${channel}"`])).map((r) => r.pid as number);
    const [pid] = await listening();
    expect(pid).toBeTypeOf('number');
    await postgresTarget.query('select pg_terminate_backend($1)', [pid]);
    await reconnectStarted; // the driver retries a second later
    await driver.close();
    release();
    await reconnectListened;
    // Its LISTEN has run; it must then be ended, not kept.
    await expect.poll(listening, { timeout: 5000 }).toEqual([]);
    expect(errors.length).toBeGreaterThan(0); // the terminated connection was reported
  });
});
