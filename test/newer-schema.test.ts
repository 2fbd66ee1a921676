// A bus that was already running when a newer rea migrated its schema (a rolling deploy): start()
// refuses a schema a newer rea marked breaking, and a started bus checks again every
// migrations.checkIntervalMs. The newer rea is played as the other tests play it: a row in the
// migrations table with a version this rea does not ship (and the column that marks it breaking).
import { expect, it } from 'vitest';
import { z } from 'zod';
import { createBus, DatabaseError, defineEvents, OptionsError } from '../src/index.js';
import { LATEST_MIGRATION } from '../src/drivers/postgres/common.js';
import { describeTargets, testBus } from './helpers/db.js';
import { captureLogger } from './helpers/log.js';
import { deferred } from './helpers/signals.js';

const events = defineEvents({ 'note.saved': z.object({ n: z.number() }) });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const fast = { migrations: { checkIntervalMs: 50 }, relay: { maxPollMs: 20 }, worker: { maxPollMs: 20 } };

describeTargets('a newer rea migrates the schema under a started bus, on $name', (target) => {
  const test = it.skipIf(!target.available);

  test('a breaking migration: the bus takes no more work, says so, and record() refuses; a running handler finishes', async () => {
    const lines: Record<string, unknown>[] = [];
    const bus = await testBus(target, events, { ...fast, logger: captureLogger(lines) });
    const s = `"${bus.schema}"`;
    const started = deferred();
    const release = deferred();
    const ran: number[] = [];
    bus.on('note.saved', 'slow', async (e) => {
      ran.push(e.payload.n);
      started.resolve();
      await release.promise;
    });
    const elected = bus.lifecycle.waitFor('leader:elected');
    await bus.start();
    await elected;
    const first = await bus.transaction((tx) => bus.record(tx, 'note.saved', { n: 1 }));
    await started.promise;
    const finished = bus.lifecycle.waitFor('job:completed', (e) => e.eventId === first);

    // The newer rea migrates: a migration this rea does not ship, marked breaking.
    const stopped = bus.lifecycle.waitFor('schema:too-new');
    const lost = bus.lifecycle.waitFor('leader:lost');
    await target.query(`alter table ${s}.migrations add column breaking boolean not null default false`);
    await target.query(`insert into ${s}.migrations (version, name, breaking) values (${LATEST_MIGRATION + 1}, 'breaking_change', true)`);
    const signal = await stopped;
    expect(signal.breaking).toEqual([LATEST_MIGRATION + 1]);
    expect(signal.error).toBeInstanceOf(DatabaseError);
    expect(signal.error).toMatchObject({ kind: 'too-new', message: expect.stringContaining(`has migration ${LATEST_MIGRATION + 1} of a newer rea`) });
    const said = lines.filter((l) => l.level === 'error');
    expect(said).toEqual([expect.objectContaining({
      schema: bus.schema, breaking_migrations: [LATEST_MIGRATION + 1], known_up_to: LATEST_MIGRATION,
      msg: expect.stringMatching(/^a newer rea applied a migration marked breaking to this schema while this process ran: it takes no more work .* Upgrade this process/),
    })]);
    // Maintenance too: the lease is given back, for a process of the newer rea to take.
    await lost;
    expect(bus.isLeader).toBe(false);

    // record() refuses, before it writes anything, and the business transaction rolls back.
    await target.query(`create table ${s}.notes (n int)`);
    const refused = bus.transaction(async (tx) => {
      await tx.query(`insert into ${s}.notes values (2)`);
      await bus.record(tx, 'note.saved', { n: 2 });
    });
    await expect(refused).rejects.toBeInstanceOf(DatabaseError);
    await expect(refused).rejects.toMatchObject({ code: 'ERR_DATABASE', kind: 'too-new', message: signal.error.message });
    await expect(bus.transaction((tx) => bus.recordMany(tx, [{ type: 'note.saved', payload: { n: 3 } }]))).rejects.toMatchObject({ kind: 'too-new' });
    expect(await target.query(`select count(*)::int as n from ${s}.notes`)).toEqual([{ n: 0 }]);
    // Its admin writes are refused as the CLI's are (an application's own repair calls); reads go on.
    await expect(bus.jobs.retry({ state: 'discarded' })).rejects.toMatchObject({ code: 'ERR_DATABASE', kind: 'too-new' });
    await expect(bus.events.requeue({ poisoned: true })).rejects.toMatchObject({ kind: 'too-new' });
    await expect(bus.endpoints.create({ url: 'https://example.com/hook', eventTypes: ['note.saved'] })).rejects.toMatchObject({ kind: 'too-new' });
    expect(await bus.endpoints.list()).toEqual([]);
    expect((await bus.jobs.list({ state: 'running' })).items).toHaveLength(1);

    // The handler that was running finishes, and its completion is written.
    release.resolve();
    await finished;
    expect(await target.query(`select state from ${s}.jobs where event_id = $1`, [first])).toEqual([{ state: 'completed' }]);

    // An event the newer rea records, and a job it queues, are left to it: no relay round of this
    // process takes the one, no claim the other (each polls every 20 ms while it runs).
    const theirs = '01900000-0000-7000-8000-0000000000aa';
    await target.query(`insert into ${s}.events (id, type, payload) values ($1, 'note.saved', '{"n": 4}')`, [theirs]);
    await target.query(`insert into ${s}.jobs (event_id, kind, target, max_attempts, lease_ms) values ($1, 'handler', 'slow', 5, 30000)`, [first]);
    await sleep(300);
    expect(await target.query(`select fanned_out_at is null as unfanned from ${s}.events where id = $1`, [theirs])).toEqual([{ unfanned: true }]);
    expect(await target.query(`select state from ${s}.jobs where event_id = $1 order by id`, [first])).toEqual([{ state: 'completed' }, { state: 'available' }]);
    expect(ran).toEqual([1]);
    // Said once, not at every check.
    expect(lines.filter((l) => l.level === 'error')).toHaveLength(1);
    await bus.stop();
  });

  test('a process that only records (never started): a record() that worked starts a check, and records refuse once it found a breaking migration', async () => {
    // A web server that records and never starts: it kept writing events in the old shape for as
    // long as it lived.
    const lines: Record<string, unknown>[] = [];
    const bus = await testBus(target, events, { migrations: { checkIntervalMs: 50 }, logger: captureLogger(lines) });
    const s = `"${bus.schema}"`;
    const found = bus.lifecycle.waitFor('schema:too-new');
    await target.query(`alter table ${s}.migrations add column breaking boolean not null default false`);
    await target.query(`insert into ${s}.migrations (version, name, breaking) values (${LATEST_MIGRATION + 1}, 'breaking_change', true)`);
    // This record still writes (the check it starts is not waited for: a record is never held up
    // by it); once the check has found the migration, records refuse.
    await bus.transaction((tx) => bus.record(tx, 'note.saved', { n: 1 }));
    const signal = await found;
    expect(signal.breaking).toEqual([LATEST_MIGRATION + 1]);
    await expect(bus.transaction((tx) => bus.record(tx, 'note.saved', { n: 2 }))).rejects.toMatchObject({ code: 'ERR_DATABASE', kind: 'too-new' });
    await expect(bus.jobs.retry({ state: 'discarded' })).rejects.toMatchObject({ kind: 'too-new' });
    expect(await target.query(`select payload->>'n' as n from ${s}.events order by id`)).toEqual([{ n: '1' }]);
    expect(lines.filter((l) => l.level === 'error')).toEqual([expect.objectContaining({
      breaking_migrations: [LATEST_MIGRATION + 1],
      msg: expect.stringMatching(/^a newer rea applied a migration marked breaking to this schema while this process ran: its record\(\) and admin writes refuse/),
    })]);
    await bus.stop();
  });

  test('a migration that is not breaking: warned about once while the bus runs, and the work goes on', async () => {
    const lines: Record<string, unknown>[] = [];
    const bus = await testBus(target, events, { ...fast, logger: captureLogger(lines) });
    const s = `"${bus.schema}"`;
    bus.on('note.saved', 'quick', () => {});
    await bus.start();
    const newer = (l: Record<string, unknown>) => String(l.msg).startsWith('a newer rea has migrated this schema');
    await target.query(`insert into ${s}.migrations (version, name) values (${LATEST_MIGRATION + 1}, 'from_the_future')`);
    await expect.poll(() => lines.some(newer)).toBe(true);
    await sleep(200); // several checks
    expect(lines.filter(newer)).toEqual([expect.objectContaining({ level: 'warn', newer_migrations: [LATEST_MIGRATION + 1], known_up_to: LATEST_MIGRATION })]);
    const done = bus.lifecycle.waitFor('job:completed');
    await bus.transaction((tx) => bus.record(tx, 'note.saved', { n: 1 }));
    await done;
  });
});

it('migrations.checkIntervalMs is at least 50 ms', () => {
  const make = (checkIntervalMs: number) => () => createBus({ database: { postgres: 'postgres://nobody@127.0.0.1:1/none' }, events, migrations: { checkIntervalMs } });
  expect(make(10)).toThrow(new OptionsError('createBus.migrations.checkIntervalMs', "at least 50 ms: each check is a read of the schema's migrations, from every started process; a newer rea's migration needs noticing within seconds, not milliseconds"));
  expect(make(50)).not.toThrow();
});
