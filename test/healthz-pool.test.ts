// GET /healthz while PostgreSQL does not answer (a proxy that stops forwarding): each probe
// answers 503 in time, and none takes a connection of the bus's pool, so probes every few seconds
// during a long stall leave the relay, the workers and bus.transaction theirs.
import pg from 'pg';
import { expect, it, onTestFinished } from 'vitest';
import { z } from 'zod';
import { createAdminHandler, defineEvents } from '../src/index.js';
import { call, serve, TOKEN } from './helpers/admin.js';
import { postgresTarget, testBus } from './helpers/db.js';
import { stallingProxy } from './helpers/faults.js';

const events = defineEvents({ 'order.created': z.object({ orderNo: z.string() }) });
const POOL = 3;
const PROBES = 6; // more than the pool has connections

/** Probe /healthz PROBES times, 200 ms apart, as a kubelet would (faster); each reply with its time. */
async function probe(url: string) {
  const replies = [];
  for (let i = 0; i < PROBES; i++) {
    const sent = Date.now();
    replies.push(call(url, 'GET', '/healthz').then((r) => ({ status: r.status, json: r.json, ms: Date.now() - sent })));
    await new Promise((r) => setTimeout(r, 200));
  }
  return Promise.all(replies);
}

/** The bus's pool, as node-postgres counts it. */
function poolOf(bus: { driver: unknown }) {
  const pool = (bus.driver as { pool: { totalCount: number; idleCount: number; waitingCount: number } }).pool;
  return () => ({ checkedOut: pool.totalCount - pool.idleCount, waiting: pool.waitingCount });
}

it.runIf(postgresTarget.available)('a stall: every probe answers 503 within its timeout, none holds a pool connection; once the database answers, the bus delivers at once', async () => {
  const proxy = await stallingProxy();
  const bus = await testBus(postgresTarget, events, { database: { postgres: proxy.url, poolSize: POOL }, worker: { minPollMs: 1, maxPollMs: 50 } } as never);
  bus.on('order.created', 'mailer', () => {});
  const elected = bus.lifecycle.waitFor('leader:elected');
  await bus.start();
  await elected;
  const s = await serve(createAdminHandler(bus, { auth: { token: TOKEN } }));
  expect((await call(s.url, 'GET', '/healthz')).status).toBe(200);
  const pool = poolOf(bus);

  proxy.stall();
  for (const r of await probe(s.url)) {
    expect(r.status).toBe(503);
    expect(r.json).toMatchObject({ status: 'unavailable', database: 'down' });
    expect(r.ms).toBeLessThan(3_000);
  }
  // Before, each probe's ping stayed checked out or queued for the pool: 3 checked out, 7
  // waiting. What remains is the relay's and the worker's own polls, caught by the stall.
  const after = pool();
  expect(after.checkedOut + after.waiting).toBeLessThanOrEqual(POOL + 1);

  proxy.resume();
  const delivered = bus.lifecycle.waitFor('job:completed');
  const t = Date.now();
  await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'A1' }));
  await delivered;
  expect(Date.now() - t).toBeLessThan(2_000);
  expect((await call(s.url, 'GET', '/healthz')).json).toMatchObject({ status: 'ok', database: 'up' });
}, 30_000);

it.runIf(postgresTarget.available)('a failover mid-stall (the old connections never answer again): the probes have not taken the pool, bus.transaction works at once', async () => {
  const proxy = await stallingProxy();
  // A process that records and serves /healthz (its relay and workers run elsewhere), on a pool
  // of the application's that closes idle connections after 300 ms, not 10 s: a long stall, in
  // which the idle connections go, seen in a short one.
  const app = new pg.Pool({ connectionString: proxy.url, max: POOL, idleTimeoutMillis: 300 });
  onTestFinished(() => void app.end().catch(() => {}));
  const bus = await testBus(postgresTarget, events, { database: { postgres: app } } as never);
  const s = await serve(createAdminHandler(bus, { auth: { token: TOKEN } }));
  expect((await call(s.url, 'GET', '/healthz')).json).toMatchObject({ database: 'up', leader: 'none' });
  const pool = poolOf(bus);

  proxy.stall();
  for (const r of await probe(s.url)) {
    expect(r.json).toMatchObject({ status: 'unavailable', database: 'down' });
    expect(r.ms).toBeLessThan(3_000);
  }
  // Before: all 3 checked out by pings, 3 more pings waiting, and every one of them on a
  // connection that will never answer again (TCP gives up after ~15 min).
  expect(pool()).toEqual({ checkedOut: 0, waiting: 0 });
  expect(app.totalCount).toBe(0); // the connection migrate() used went, idle

  proxy.recoverForNewConnectionsOnly();
  const t = Date.now();
  const recorded = await Promise.race([
    bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'B1' })).then(() => 'recorded'),
    new Promise((r) => setTimeout(() => r('no connection'), 5_000)),
  ]);
  expect(recorded).toBe('recorded');
  expect(Date.now() - t).toBeLessThan(5_000);
  expect((await call(s.url, 'GET', '/healthz')).json).toMatchObject({ database: 'up' });
}, 30_000);
