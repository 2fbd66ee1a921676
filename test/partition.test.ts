// A worker that goes silent mid-transaction (its host froze, or lost its network) and a statement
// that waits on a lock past its deadline: neither may leave the server holding a transaction, and
// the locks in it, until TCP gives up, while every other worker waits on them.
import { expect, it, vi } from 'vitest';
import pg from 'pg';
import { z } from 'zod';
import { DatabaseError, defineEvents } from '../src/index.js';
import { PG_URL, postgresTarget, testBus } from './helpers/db.js';
import { stallingProxy } from './helpers/faults.js';

const events = defineEvents({ 'order.created': z.object({ orderNo: z.string() }) });
const test = it.runIf(postgresTarget.available);

test("a transactional handler's worker that goes silent mid-transaction: the server ends its transaction within the job's lease, and another worker runs the job once", async () => {
  // Its backend sat idle in transaction holding the consume record's lock; the job's next attempts
  // waited on that lock until their timeouts, each counted, to the last: discarded, never run.
  const proxy = await stallingProxy();
  const relay = await testBus(postgresTarget, events, { worker: { enabled: false }, rescuer: { intervalMs: 100 }, relay: { minPollMs: 5, maxPollMs: 50 } });
  const s = relay.schema;
  await postgresTarget.query(`create table "${s}".effects (event_id uuid not null, worker text not null)`);
  await relay.start(); // the leader: its rescuer returns the silent worker's job when its lease runs out
  const options = { schema: s, relay: { enabled: false }, worker: { leaseMarginMs: 500, minPollMs: 5, maxPollMs: 50 } } as const;
  const silent = await testBus(postgresTarget, events, { ...options, database: { postgres: proxy.url, poolSize: 2, queryTimeoutMs: 1000 } } as never);
  let stalled!: () => void;
  const wentSilent = new Promise<void>((resolve) => (stalled = resolve));
  silent.on('order.created', 'ledger', async (e, ctx) => {
    await ctx.tx!.query(`insert into "${s}".effects (event_id, worker) values ($1, 'silent')`, [e.id]);
    proxy.partition(); // from here the server hears nothing more from this worker (not even a close), nor it from the server
    stalled();
  }, { transactional: true, timeoutMs: 1000 });
  await silent.start();
  const id = await relay.transaction((tx) => relay.record(tx, 'order.created', { orderNo: 'P1' }));
  await wentSilent;

  const other = await testBus(postgresTarget, events, { ...options });
  const ran: number[] = [];
  other.on('order.created', 'ledger', async (e, ctx) => {
    ran.push(ctx.attempt);
    await ctx.tx!.query(`insert into "${s}".effects (event_id, worker) values ($1, 'other')`, [e.id]);
  }, { transactional: true, timeoutMs: 1000 });
  await other.start();
  await vi.waitFor(async () => {
    expect(await postgresTarget.query(`select state, attempt from "${s}".jobs where event_id = $1`, [id])).toEqual([{ state: 'completed', attempt: 2 }]);
  }, { timeout: 15_000, interval: 100 });
  expect(ran).toEqual([2]);
  // The silent worker's write went with its transaction; the effect is there once.
  expect(await postgresTarget.query(`select worker from "${s}".effects`)).toEqual([{ worker: 'other' }]);
  await silent.stop({ timeoutMs: 0 });
}, 30_000);

test('a statement that waits on a lock past its deadline is cancelled on the server, not left waiting behind the lock once rea closed its connection', async () => {
  // rea closed the connection at its deadline, but a backend waiting on a lock does not notice its
  // client is gone until it next writes to it: it kept its transaction (and what it had locked)
  // for as long as the lock's holder kept the lock.
  const bus = await testBus(postgresTarget, events, { database: { postgres: PG_URL, poolSize: 2, queryTimeoutMs: 500 } } as never);
  const s = bus.schema;
  await postgresTarget.query(`create table "${s}".stock (sku text primary key)`);
  const holder = new pg.Client({ connectionString: PG_URL });
  await holder.connect();
  try {
    await holder.query('begin');
    await holder.query(`lock table "${s}".stock in access exclusive mode`);
    const err = await bus.transaction(async (tx) => {
      await tx.query(`insert into "${s}".stock (sku) values ('A-1')`);
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DatabaseError);
    expect(err).toMatchObject({ kind: 'unreachable' });
    // Nothing of rea's waits on the lock any more, though its holder still holds it.
    await vi.waitFor(async () => {
      const waiting = await postgresTarget.query(
        `select pid from pg_stat_activity where wait_event_type = 'Lock' and query like $1 and pid <> pg_backend_pid()`, [`%"${s}".stock%`]);
      expect(waiting).toEqual([]);
    }, { timeout: 3_000, interval: 50 });
  } finally {
    await holder.query('rollback').catch(() => {});
    await holder.end();
  }
});

test("a transactional handler's attempt that waits on its consume record's lock ends at the handler's timeout, not at the connection's deadline", async () => {
  // The worker's timer cannot cut short a statement in progress: the consume insert waited on
  // another transaction's lock for database.queryTimeoutMs (30 s), holding its pool connection.
  const bus = await testBus(postgresTarget, events, { worker: { minPollMs: 5, maxPollMs: 50 }, relay: { minPollMs: 5, maxPollMs: 50 } });
  const s = bus.schema;
  const ran: string[] = [];
  bus.on('order.created', 'ledger', (e) => void ran.push(e.id), { transactional: true, timeoutMs: 500 });
  const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'L1' }));
  const holder = new pg.Client({ connectionString: PG_URL });
  await holder.connect();
  try {
    // Another attempt's transaction, still open, holds the consume record of (id, ledger).
    await holder.query('begin');
    await holder.query(`insert into "${s}".consumes (event_id, handler) values ($1, 'ledger')`, [id]);
    const failed = bus.lifecycle.waitFor('job:failed');
    const t = Date.now();
    await bus.start();
    const e = await failed;
    expect(Date.now() - t).toBeLessThan(5_000);
    expect(e).toMatchObject({ errorName: 'HandlerTimeoutError', attempt: 1 });
    expect(ran).toEqual([]);
  } finally {
    await holder.query('rollback').catch(() => {});
    await holder.end();
  }
});
