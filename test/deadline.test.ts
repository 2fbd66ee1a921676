// database.queryTimeoutMs: a failover that leaves rea's connections silent for ever (neither an
// answer nor a close, as when the server's address moves or a NAT entry goes) must not stop
// delivery until TCP gives up (some 15 minutes): rea's statements give up at their deadline, the
// connection is closed, and the relay, the worker and the leader carry on over new ones. The
// application's SQL in rea's transactions has it too; migrations do not.
import { expect, it } from 'vitest';
import { z } from 'zod';
import { createAdminHandler, createBus, DatabaseError, defineEvents, OptionsError } from '../src/index.js';
import { bearer, call, serve, TOKEN } from './helpers/admin.js';
import { PG_URL, postgresTarget, testBus } from './helpers/db.js';
import { stallingProxy } from './helpers/faults.js';
import { captureLogger } from './helpers/log.js';

const events = defineEvents({ 'order.created': z.object({ orderNo: z.string() }) });
const DEADLINE_MS = 1_000;

/** The URL with a password (trust auth takes any): no message may show it. */
function withPassword(url: string): string {
  const u = new URL(url);
  u.password = 'hunter2-secret';
  return u.toString();
}

it.runIf(postgresTarget.available)('a failover mid-run: the relay, the worker and the leader move to new connections within the deadline, and deliver', async () => {
  const proxy = await stallingProxy();
  const bus = await testBus(postgresTarget, events, {
    database: { postgres: withPassword(proxy.url), poolSize: 4, queryTimeoutMs: DEADLINE_MS },
    relay: { minPollMs: 1, maxPollMs: 50 }, worker: { minPollMs: 1, maxPollMs: 50 },
  } as never);
  const seen: string[] = [];
  bus.on('order.created', 'mailer', (e) => void seen.push(e.payload.orderNo));
  const elected = bus.lifecycle.waitFor('leader:elected');
  await bus.start();
  await elected;
  await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'A1' }));
  await expect.poll(() => seen, { timeout: 5_000 }).toEqual(['A1']);

  // Every connection the bus holds goes silent; the polls in flight (and those sent next on the
  // same connections) never get an answer. New connections reach the server.
  proxy.stall();
  await new Promise((r) => setTimeout(r, 300));
  proxy.recoverForNewConnectionsOnly();

  // Recorded by another process, straight to the server.
  const producer = createBus({ database: { postgres: PG_URL }, schema: bus.schema, events, relay: { enabled: false }, worker: { enabled: false } });
  try {
    await producer.transaction((tx) => producer.record(tx, 'order.created', { orderNo: 'B1' }));
  } finally {
    await producer.stop();
  }
  const t = Date.now();
  // Before: nothing delivered, the relay's round waiting on its silent connection (the leader's
  // too), until TCP gave up some 15 minutes later.
  await expect.poll(() => seen, { timeout: 10_000, interval: 50 }).toEqual(['A1', 'B1']);
  expect(Date.now() - t).toBeLessThan(DEADLINE_MS * 4);
  // The leader renews its lease over a new connection too.
  const lease = async () => (await postgresTarget.query(`select extract(epoch from expires_at) * 1000 as at from "${bus.schema}".leader`))[0]?.at;
  const before = Number(await lease());
  await expect.poll(async () => Number(await lease()), { timeout: 15_000, interval: 200 }).toBeGreaterThan(before);
}, 40_000);

it.runIf(postgresTarget.available)('wake-ups come back after a failover: the LISTEN connection is asked for an answer every queryTimeoutMs and replaced when none comes', async () => {
  const proxy = await stallingProxy();
  // Polls 20-30 s apart: within the test's bounds, only a wake-up delivers.
  const bus = await testBus(postgresTarget, events, {
    database: { postgres: proxy.url, poolSize: 4, queryTimeoutMs: DEADLINE_MS },
    relay: { minPollMs: 20_000, maxPollMs: 30_000 }, worker: { minPollMs: 20_000, maxPollMs: 30_000 },
  } as never);
  const seen: string[] = [];
  bus.on('order.created', 'mailer', (e) => void seen.push(e.payload.orderNo));
  await bus.start();
  const producer = createBus({ database: { postgres: PG_URL }, schema: bus.schema, events, relay: { enabled: false }, worker: { enabled: false } });
  try {
    await producer.transaction((tx) => producer.record(tx, 'order.created', { orderNo: 'A1' }));
    await expect.poll(() => seen, { timeout: 5_000 }).toEqual(['A1']);

    proxy.stall();
    await new Promise((r) => setTimeout(r, 300));
    proxy.recoverForNewConnectionsOnly();
    // The NOTIFY of this commit goes to the silent connection. Before, nothing more was heard
    // until keepalive gave up on it (some 12 minutes), and the events waited for the next poll.
    await producer.transaction((tx) => producer.record(tx, 'order.created', { orderNo: 'B1' }));
    await expect.poll(() => seen, { timeout: 8_000, interval: 50 }).toEqual(['A1', 'B1']);
    await producer.transaction((tx) => producer.record(tx, 'order.created', { orderNo: 'C1' }));
    await expect.poll(() => seen, { timeout: 3_000, interval: 20 }).toEqual(['A1', 'B1', 'C1']);
  } finally {
    await producer.stop();
  }
}, 40_000);

it.runIf(postgresTarget.available)('a COMMIT that gets no answer: DatabaseError unreachable within the deadline, saying the outcome is unknown and naming no password; the next transaction works', async () => {
  const proxy = await stallingProxy();
  const bus = await testBus(postgresTarget, events, { database: { postgres: withPassword(proxy.url), poolSize: 2, queryTimeoutMs: DEADLINE_MS } } as never);
  const t = Date.now();
  const err = await bus.transaction(async (tx) => {
    await bus.record(tx, 'order.created', { orderNo: 'C1' });
    proxy.stall(); // the record travels with COMMIT, which then goes unanswered
  }).catch((e: unknown) => e);
  const ms = Date.now() - t;
  expect(err).toBeInstanceOf(DatabaseError);
  expect(err).toMatchObject({ kind: 'unreachable', code: 'ERR_DATABASE' });
  // The database is the one the tests run on (REA_TEST_DATABASE_URL), not always 'test'.
  const database = new URL(PG_URL).pathname.slice(1);
  expect((err as Error).message).toMatch(new RegExp(`^no answer from PostgreSQL at 127\\.0\\.0\\.1:\\d+/${database} \\(user postgres\\) to a statement within 1000 ms \\(database\\.queryTimeoutMs\\); the connection was closed; whether the transaction committed is not known$`));
  expect(JSON.stringify({ message: (err as Error).message, cause: String((err as Error).cause) })).not.toContain('hunter2');
  expect(ms).toBeGreaterThanOrEqual(DEADLINE_MS - 50);
  expect(ms).toBeLessThan(DEADLINE_MS * 4);

  proxy.recoverForNewConnectionsOnly();
  await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'C2' }));
  const rows = await postgresTarget.query(`select payload->>'orderNo' as o from "${bus.schema}".events order by o`);
  expect(rows.map((r) => r.o)).toContain('C2');
}, 30_000);

it.runIf(postgresTarget.available)('the application\'s SQL in rea\'s transactions has the deadline too (it would hold a pool connection through a failover); 0 lifts it', async () => {
  const bus = await testBus(postgresTarget, events, { database: { postgres: PG_URL, poolSize: 2, queryTimeoutMs: 300 } } as never);
  const err = await bus.transaction(async (tx) => {
    await bus.record(tx, 'order.created', { orderNo: 'D1' });
    await tx.query('select pg_sleep(0.8)');
  }).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(DatabaseError);
  expect((err as Error).message).toMatch(/to a statement within 300 ms \(database\.queryTimeoutMs\); the connection was closed$/);
  // Nothing of it was stored, and the bus goes on.
  await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'D2' }));
  expect(await postgresTarget.query(`select payload->>'orderNo' as o from "${bus.schema}".events`)).toEqual([{ o: 'D2' }]);

  const unbounded = await testBus(postgresTarget, events, { database: { postgres: PG_URL, poolSize: 2, queryTimeoutMs: 0 } } as never);
  await unbounded.transaction(async (tx) => {
    await tx.query('select pg_sleep(0.8)');
    await unbounded.record(tx, 'order.created', { orderNo: 'E1' });
  });
  expect(await postgresTarget.query(`select count(*)::int as n from "${unbounded.schema}".events`)).toEqual([{ n: 1 }]);
}, 20_000);

it.runIf(postgresTarget.available)('after a statement past its deadline, the idle connections closed with it leave the pool: the next transactions get new ones, not dead ones', async () => {
  // They were closed without an error, which is the only way the pool forgets an idle client: it
  // kept them, and each transaction given one failed with "Connection terminated unexpectedly".
  const lines: Record<string, unknown>[] = [];
  const bus = await testBus(postgresTarget, events, { database: { postgres: PG_URL, poolSize: 4, queryTimeoutMs: 300 }, logger: captureLogger(lines) } as never);
  const twoAtOnce = (prefix: string) => Promise.all([1, 2].map((n) => bus.transaction(async (tx) => {
    await tx.query('select pg_sleep(0.05)');
    await bus.record(tx, 'order.created', { orderNo: `${prefix}${n}` });
  })));
  await twoAtOnce('F'); // two idle connections in the pool now
  const err = await bus.transaction((tx) => tx.query('select pg_sleep(0.8)')).catch((e: unknown) => e);
  expect(err).toMatchObject({ kind: 'unreachable', message: expect.stringContaining('within 300 ms (database.queryTimeoutMs)') });
  await twoAtOnce('G');
  const rows = await postgresTarget.query(`select payload->>'orderNo' as o from "${bus.schema}".events order by o`);
  expect(rows.map((r) => r.o)).toEqual(['F1', 'F2', 'G1', 'G2']);
  // Closing them is rea's own doing, said by the deadline's error: not a warning per connection.
  expect(lines.filter((l) => l.msg === 'database connection error')).toEqual([]);
}, 20_000);

it.runIf(postgresTarget.available)('a transactional handler\'s own SQL is bounded by its timeout, not the deadline: a statement longer than queryTimeoutMs completes, and the job with it', async () => {
  const bus = await testBus(postgresTarget, events, { database: { postgres: PG_URL, poolSize: 3, queryTimeoutMs: 300 } } as never);
  await postgresTarget.query(`create table "${bus.schema}".slow_effects (order_no text primary key)`);
  bus.on('order.created', 'report', async (e, ctx) => {
    // Before: DatabaseError at 300 ms on every attempt, though the handler has 10 s.
    await ctx.tx!.query(`insert into "${bus.schema}".slow_effects select $1 from pg_sleep(0.8)`, [e.payload.orderNo]);
  }, { transactional: true, timeoutMs: 10_000, maxAttempts: 1 });
  const done = bus.lifecycle.waitFor('job:completed', (j) => j.handler === 'report', 15_000);
  const failed = bus.lifecycle.waitFor('job:discarded', (j) => j.handler === 'report', 15_000).then((j) => { throw new Error(`discarded: ${j.error}`); });
  await bus.start();
  await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'F1' }));
  await Promise.race([done, failed]);
  expect(await postgresTarget.query(`select order_no from "${bus.schema}".slow_effects`)).toEqual([{ order_no: 'F1' }]);
}, 30_000);

it.runIf(postgresTarget.available)('the admin API\'s reads have the deadline: through a failover a panel\'s requests answer 503 and hold no pool connection, so the bus goes on', async () => {
  const proxy = await stallingProxy();
  // connect_timeout 1 s: a request that finds no connection opens one, which waits through the stall too.
  const url = new URL(withPassword(proxy.url));
  url.searchParams.set('connect_timeout', '1');
  const bus = await testBus(postgresTarget, events, { database: { postgres: url.toString(), poolSize: 2, queryTimeoutMs: DEADLINE_MS } } as never);
  await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'G1' }));
  const s = await serve(createAdminHandler(bus, { auth: { token: TOKEN } }));
  expect((await call(s.url, 'GET', '/api/events', { headers: bearer() })).status).toBe(200);

  proxy.stall();
  // More requests than the pool has connections, as a panel's refreshes make. Before: each waited
  // on its silent connection until TCP gave up, holding it, and the bus had none left.
  const t = Date.now();
  const replies = await Promise.all([0, 1, 2].map(() => call(s.url, 'GET', '/api/events', { headers: bearer() })));
  expect(replies.map((r) => r.status)).toEqual([503, 503, 503]);
  expect(replies[0]!.json.error).toMatchObject({ code: 'ERR_DATABASE' });
  expect(replies.map((r) => r.text).join('')).not.toContain('hunter2');
  expect(Date.now() - t).toBeLessThan(DEADLINE_MS * 4);

  proxy.recoverForNewConnectionsOnly();
  await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'G2' }));
  const listed = await call(s.url, 'GET', '/api/events', { headers: bearer() });
  expect(listed.status).toBe(200);
  expect(JSON.stringify(listed.json)).toContain('G2');
}, 30_000);

it.runIf(postgresTarget.available)('migrations keep no deadline: they take as long as the tables they alter need', async () => {
  // 1 ms: every statement of a migration takes longer; with the deadline, migrate() failed.
  const bus = createBus({ database: { postgres: PG_URL, poolSize: 2, queryTimeoutMs: 1 }, schema: `t_${Date.now().toString(36)}_mig`, events });
  try {
    await expect(bus.migrate()).resolves.toBeDefined();
    expect(await postgresTarget.query(`select count(*)::int as n from information_schema.tables where table_schema = $1 and table_name = 'events'`, [bus.schema]))
      .toEqual([{ n: 1 }]);
  } finally {
    await bus.stop();
    await postgresTarget.query(`drop schema if exists "${bus.schema}" cascade`);
  }
}, 20_000);

it('queryTimeoutMs: a whole number of ms ≥ 0, and only for PostgreSQL', () => {
  expect(() => createBus({ database: { postgres: PG_URL, queryTimeoutMs: -1 }, events }))
    .toThrow(OptionsError);
  expect(() => createBus({ database: { postgres: PG_URL, queryTimeoutMs: 1.5 }, events }))
    .toThrow(/database\.queryTimeoutMs/);
  expect(() => createBus({ database: { pglite: 'memory://', queryTimeoutMs: 1000 } as never, events }))
    .toThrow(/unrecognized|unknown|queryTimeoutMs/i);
  expect(() => createBus({ database: { postgres: PG_URL, queryTimeoutMs: 0 }, events })).not.toThrow();
});
