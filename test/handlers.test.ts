// Handlers removed or renamed in the code: their stored subscription keeps the relay making jobs
// nobody runs, which pins their events past retention. The heartbeat tells such a handler from a
// busy one (handler_unattended), and forgetting it stops the jobs and lets retention trim again.
import pg from 'pg';
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { formatHandler } from '../src/cli/handlers.js';
import { main } from '../src/cli/main.js';
import { BusStateError, createBus, defineEvents, HandlerInUseError, NotFoundError, OptionsError } from '../src/index.js';
import { describeTargets, PG_URL, postgresTarget, targets, testBus } from './helpers/db.js';
import { OPERATOR_BATCH } from '../src/drivers/postgres/batches.js';
import { quoteSchema } from '../src/drivers/postgres/common.js';
import { PostgresAdminExecutor } from '../src/drivers/postgres/executor-admin.js';

const events = defineEvents({ 'order.placed': z.object({ n: z.number() }) });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/**
 * alerts.handlerUnattendedMs in these tests, against a heartbeat every 50 ms: wide enough that a
 * heartbeat held up by a loaded machine (PGlite answering one statement at a time, 317 ms seen
 * once at 200) is not taken for a handler nobody runs.
 */
const UNATTENDED_MS = 1000;

describeTargets('stored handlers on $name', (target) => {
  const test = it.skipIf(!target.available);

  test('a handler gone from the code is unattended once its heartbeat is old; forgetting it cancels its jobs and lets retention trim its events', async () => {
    // v1 of the service runs 'old-sms', then is replaced by v2, which has only 'sms'.
    const v1 = await testBus(target, events, { relay: { enabled: false } });
    v1.on('order.placed', 'old-sms', () => {});
    await v1.start();
    await v1.stop();
    const v2 = await testBus(target, events, {
      schema: v1.schema, alerts: { handlerUnattendedMs: UNATTENDED_MS }, worker: { heartbeatMs: 50 },
      retention: { enabled: false, events: { olderThanMs: 1 } },
    });
    v2.on('order.placed', 'sms', () => {});
    const done = v2.lifecycle.waitFor('job:completed');
    await v2.start();
    const id = await v2.transaction((tx) => v2.record(tx, 'order.placed', { n: 1 }));
    await done;
    await sleep(UNATTENDED_MS + 200); // past the threshold: 'sms' is refreshed every 50 ms, 'old-sms' never again

    const jobs = Object.fromEntries((await v2.jobs.forEvent(id)).map((j) => [j.target, j.state]));
    expect(jobs).toEqual({ sms: 'completed', 'old-sms': 'available' });
    const alerts = (await v2.overview()).alerts.filter((a) => a.name === 'handler_unattended');
    expect(alerts).toHaveLength(1);
    expect(alerts[0]!.message).toMatch(/^handler 'old-sms' has 1 waiting job and no running worker has had it for .*`rea handlers forget old-sms`/);
    expect(alerts[0]).toMatchObject({ threshold: UNATTENDED_MS, unit: 'ms' });
    expect(alerts[0]!.figure).toBeGreaterThan(UNATTENDED_MS);
    const listed = Object.fromEntries((await v2.handlers.list()).map((h) => [h.name, h]));
    expect(listed['old-sms']).toMatchObject({ patterns: ['order.placed'], waiting: 1, running: 0 });
    expect(listed.sms).toMatchObject({ waiting: 0 });
    expect(listed.sms!.readAt.getTime() - listed.sms!.seenAt.getTime()).toBeLessThan(UNATTENDED_MS);
    // Its waiting job pins the event: retention leaves it.
    expect((await v2.retention.run()).rules.find((r) => r.rule === 'events')!.removed).toBe(0);

    // Refused for a handler that is here, or was had recently; unknown names are NotFound.
    await expect(v2.handlers.forget('sms')).rejects.toBeInstanceOf(BusStateError);
    await expect(v2.handlers.forget('nosuch')).rejects.toBeInstanceOf(NotFoundError);
    // A typo is answered with the names there are, as a retry or replay by handler name is.
    await expect(v2.handlers.forget('old-smss')).rejects.toThrow(`handler "old-smss" not found; known handlers: 'old-sms', 'sms'`);
    // A misspelt force is named, not dropped.
    await expect(v2.handlers.forget('old-sms', { forse: true } as never)).rejects.toThrow('handlers.forget(options): unknown option(s) forse (known: force)');
    expect(await v2.handlers.forget('old-sms')).toEqual({ cancelled: 1 });
    const [cancelled] = (await v2.jobs.forEvent(id)).filter((j) => j.target === 'old-sms');
    expect(cancelled).toMatchObject({ state: 'cancelled' });
    expect(cancelled!.errors.at(-1)).toMatchObject({ name: 'HandlerForgotten' });
    expect((await v2.overview()).alerts.map((a) => a.name)).not.toContain('handler_unattended');

    // New events get no job for it, and retention can trim the old event again.
    const next = v2.lifecycle.waitFor('job:completed');
    const later = await v2.transaction((tx) => v2.record(tx, 'order.placed', { n: 2 }));
    await next;
    expect((await v2.jobs.forEvent(later)).map((j) => j.target)).toEqual(['sms']);
    const removed = (await v2.retention.run()).rules.find((r) => r.rule === 'events')!.removed;
    expect(removed).toBeGreaterThanOrEqual(1);
    expect(await v2.events.get(id)).toBeNull();
  });

  test('handlers.list says when a count stopped at the exact-count limit; rea handlers list prints "more than"', async () => {
    // It printed "waiting 10000" (and JSON 10000) while 82,357 waited: the limit, read as the figure.
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false }, overview: { exactCountLimit: 3 } });
    await bus.driver.executor.handlerUpsertMany(['busy', 'even'].map((name) => ({ name, patterns: ['order.placed'], coalesceSubject: false, maxAttempts: 5, leaseMs: 1000, priority: 0 })));
    const id = await bus.transaction((tx) => bus.record(tx, 'order.placed', { n: 1 }));
    const add = (name: string, n: number) => target.query(
      `insert into "${bus.schema}".jobs (event_id, kind, target, max_attempts, lease_ms, state) select $1, 'handler', $2, 5, 1000, 'available' from generate_series(1, $3::int)`, [id, name, n]);
    await add('busy', 5);
    await add('even', 3);
    const listed = Object.fromEntries((await bus.handlers.list()).map((h) => [h.name, h]));
    expect(listed.busy).toMatchObject({ waiting: 3, running: 0, capped: ['waiting'] });
    expect(listed.even).toMatchObject({ waiting: 3, running: 0, capped: [] });
    expect(formatHandler(listed.busy!)).toContain('waiting more than 3 · running 0');
    expect(formatHandler(listed.even!)).toContain('waiting 3 · running 0');
  });

  test('a handler a running worker has is never unattended, however long its jobs wait, and forget refuses it without force', async () => {
    const worker = await testBus(target, events, { relay: { enabled: false }, worker: { heartbeatMs: 50 } });
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    worker.on('order.placed', 'slow', () => held, { concurrency: 1 });
    await worker.start();
    const admin = await testBus(target, events, { schema: worker.schema, relay: { enabled: false }, worker: { enabled: false }, alerts: { handlerUnattendedMs: UNATTENDED_MS } });
    await admin.start();
    for (let n = 0; n < 3; n++) await admin.transaction((tx) => admin.record(tx, 'order.placed', { n }));
    await admin.relayOnce();
    await sleep(UNATTENDED_MS + 300); // its jobs wait past the threshold, its heartbeat does not
    const listed = (await admin.handlers.list()).find((h) => h.name === 'slow')!;
    expect(listed.waiting + listed.running).toBe(3);
    expect((await admin.overview()).alerts.map((a) => a.name)).not.toContain('handler_unattended');
    // The refusal says how to override it in code: the option, as the caller writes it.
    const refused = await admin.handlers.forget('slow').catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(HandlerInUseError);
    expect(refused).toBeInstanceOf(BusStateError);
    expect(refused).toMatchObject({ code: 'ERR_BUS_STATE', handler: 'slow' });
    expect((refused as Error).message).toMatch(/^handler 'slow' was had by a running worker at .*: stop it first, or pass \{ force: true \}$/);
    release();
  });

  test('with the alert off, forget without force still refuses a handler seen within two heartbeats, however long the heartbeat', async () => {
    const heartbeatMs = 20 * 60_000; // allowed with the alert off; longer than the alert's 15 min default
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false, heartbeatMs }, alerts: { handlerUnattendedMs: -1 } });
    await bus.driver.executor.handlerUpsertMany([{ name: 'slow-beat', patterns: ['order.placed'], coalesceSubject: false, maxAttempts: 5, leaseMs: 1000, priority: 0 }]);
    await target.query(`update "${bus.schema}".handlers set seen_at = now() - interval '16 minutes' where name = 'slow-beat'`);
    await expect(bus.handlers.forget('slow-beat')).rejects.toBeInstanceOf(HandlerInUseError);
    await target.query(`update "${bus.schema}".handlers set seen_at = now() - interval '41 minutes' where name = 'slow-beat'`);
    expect(await bus.handlers.forget('slow-beat')).toEqual({ cancelled: 0 });
  });

  test('forget cancels the waiting jobs in bounded batches; a name whose row is gone but whose jobs wait again (retried by name) has them cancelled', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false }, retention: { enabled: false } });
    const s = bus.schema;
    await bus.driver.executor.handlerUpsertMany([
      { name: 'gone', patterns: ['order.placed'], coalesceSubject: false, maxAttempts: 5, leaseMs: 35_000, priority: 0 },
    ]);
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.placed', { n: 1 }));
    const n = OPERATOR_BATCH * 2 + 500;
    // After an outage of days: thousands of waiting jobs of a handler gone from the code, one of
    // it running, and jobs of another handler that must stay.
    await target.query(
      `with ev as (
         insert into "${s}".events (id, type, payload, fanned_out_at)
         select gen_random_uuid(), 'order.placed', '{"n":1}', now() from generate_series(1, $2::int) returning id)
       insert into "${s}".jobs (event_id, kind, target, max_attempts, lease_ms, state, lease_expires_at)
       select id, 'handler', 'gone', 5, 1000, case when row_number() over () % 2 = 0 then 'available' else 'retryable' end, null::timestamptz from ev
       union all select $1::uuid, 'handler', 'gone', 5, 1000, 'running', now() + interval '1 hour'
       union all select $1::uuid, 'handler', 'other', 5, 1000, 'available', null from generate_series(1, 3)`, [eventId, n]);
    const changed: number[] = [];
    const counting = {
      query: async (text: string, params?: unknown[]) => {
        const r = await bus.driver.query<Record<string, unknown>>(text, params);
        const ids = r.rows[0]?.ids;
        changed.push(Array.isArray(ids) ? ids.length : 0);
        return r;
      },
    } as never;
    const admin = new PostgresAdminExecutor(counting, quoteSchema(s));
    expect(await admin.handlerForget({ name: 'gone', unseenForMs: null, now: null })).toMatchObject({ forgotten: true, cancelled: n });
    // Before, one statement deleted the row and cancelled all of them at once.
    expect(changed).toEqual([0, OPERATOR_BATCH, OPERATOR_BATCH, 500]);
    const states = async () => Object.fromEntries((await target.query<{ k: string; n: number }>(
      `select target || ':' || state as k, count(*)::int as n from "${s}".jobs group by 1`)).map((r) => [r.k, r.n]));
    expect(await states()).toEqual({ 'gone:cancelled': n, 'gone:running': 1, 'other:available': 3 });

    // An operator retries them by name: they wait for a handler no bus stores. Forgetting the
    // name again cancels them (it used to say the handler was not found and leave them waiting).
    expect(await bus.jobs.retry({ state: 'cancelled', handler: 'gone' })).toHaveLength(n);
    expect(await bus.handlers.forget('gone')).toEqual({ cancelled: n });
    expect(await states()).toEqual({ 'gone:cancelled': n, 'gone:running': 1, 'other:available': 3 });
    await expect(bus.handlers.forget('gone')).rejects.toBeInstanceOf(NotFoundError);
  });

  test('jobs of a forgotten handler retried by name wait for nobody: handler_unattended counts them once they are due past the threshold', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false }, retention: { enabled: false }, alerts: { handlerUnattendedMs: UNATTENDED_MS } });
    const s = bus.schema;
    await bus.driver.executor.handlerUpsertMany([
      { name: 'sms', patterns: ['order.placed'], coalesceSubject: false, maxAttempts: 5, leaseMs: 35_000, priority: 0 },
    ]);
    const id = await bus.transaction((tx) => bus.record(tx, 'order.placed', { n: 1 }));
    await bus.relayOnce();
    expect(await bus.handlers.forget('sms', { force: true })).toEqual({ cancelled: 1 });
    const [job] = await bus.jobs.retry({ state: 'cancelled', handler: 'sms' });
    const unattended = async () => (await bus.overview()).alerts.filter((a) => a.name === 'handler_unattended');
    // Just retried: not yet past the threshold.
    expect(await unattended()).toEqual([]);
    // An hour later (the job came due an hour ago), nothing has run it: no handlers row, no heartbeat.
    await target.query(`update "${s}".jobs set scheduled_at = now() - interval '1 hour' where id = $1`, [job]);
    const [alert] = await unattended();
    expect(alert).toMatchObject({ threshold: UNATTENDED_MS, unit: 'ms' });
    expect(alert!.figure).toBeGreaterThanOrEqual(3_600_000);
    expect(alert!.message).toMatch(/^1 waiting job of handler 'sms', which no bus stores \(it was forgotten\), has waited 60 min: .*`rea handlers forget sms` \(cancels them\)$/);
    // Forgetting the name again cancels it, and the alert clears.
    expect(await bus.handlers.forget('sms')).toEqual({ cancelled: 1 });
    expect(await unattended()).toEqual([]);
    expect((await bus.jobs.forEvent(id)).map((j) => j.state)).toEqual(['cancelled']);
  });

  test('jobs.retry by state names a handler no bus registered, with the known ones; a forgotten handler with stored jobs still counts', async () => {
    const v1 = await testBus(target, events, { relay: { enabled: false } });
    v1.on('order.placed', 'mailer', () => {});
    v1.on('order.placed', 'sms', () => {});
    await v1.start();
    await v1.stop();
    const admin = await testBus(target, events, { schema: v1.schema, relay: { enabled: false }, worker: { enabled: false } });
    const err = await admin.jobs.retry({ state: 'discarded', handler: 'mailr' }).then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(NotFoundError);
    expect((err as Error).message).toBe(`handler "mailr" not found; known handlers: 'mailer', 'sms'`);
    expect(await admin.jobs.retry({ state: 'discarded', handler: 'mailer' })).toEqual([]);

    // 'sms' is forgotten, but its cancelled jobs can still be retried by name.
    const [eventId] = await admin.transaction((tx) => admin.recordMany(tx, [{ type: 'order.placed', payload: { n: 1 } }]));
    await admin.relayOnce();
    expect(await admin.handlers.forget('sms', { force: true })).toEqual({ cancelled: 1 });
    const [smsJob] = (await admin.jobs.forEvent(eventId!)).filter((j) => j.target === 'sms');
    expect(await admin.jobs.retry({ state: 'cancelled', handler: 'sms' })).toEqual([smsJob!.id]);

    // By handler means handler jobs: a cancelled webhook job whose target happens to read 'mailer' stays.
    await target.query(`insert into "${admin.schema}".jobs (event_id, kind, target, state, max_attempts, lease_ms, finalized_at)
      values ($1, 'webhook', 'mailer', 'cancelled', 18, 20000, now())`, [eventId]);
    const [mailerJob] = (await admin.jobs.forEvent(eventId!)).filter((j) => j.target === 'mailer' && j.kind === 'handler');
    await admin.jobs.cancel([mailerJob!.id]);
    expect(await admin.jobs.retry({ state: 'cancelled', handler: 'mailer' })).toEqual([mailerJob!.id]);
    expect((await admin.jobs.forEvent(eventId!)).find((j) => j.kind === 'webhook')!.state).toBe('cancelled');
  });
});

describe('rea handlers', () => {
  it.skipIf(!targets[1]!.available)('list and forget from the command line', async () => {
    const target = targets[1]!;
    const v1 = await testBus(target, events, { relay: { enabled: false } });
    v1.on('order.placed', 'gone', () => {});
    await v1.start();
    await v1.stop();
    const out: string[] = [];
    vi.spyOn(console, 'log').mockImplementation((...m: unknown[]) => void out.push(m.join(' ')));
    vi.spyOn(console, 'error').mockImplementation((...m: unknown[]) => void out.push(m.join(' ')));
    const db = ['--database-url', PG_URL, '--schema', v1.schema];
    try {
      await main(['node', 'rea', 'handlers', 'list', ...db]);
      expect(out.pop()).toMatch(/^gone {2}order\.placed {2}waiting 0 · running 0 · last had by a worker .* ago$/);
      // A worker had it a moment ago: refused (exit 1), and the way past it is the flag, not the
      // library's option ("pass force" named neither).
      process.exitCode = undefined;
      await main(['node', 'rea', 'handlers', 'forget', 'gone', ...db]);
      expect(process.exitCode).toBe(1);
      expect(out.pop()).toMatch(/^rea: handler 'gone' was had by a running worker at .*: stop it first, or pass --force$/);
      await main(['node', 'rea', 'handlers', 'forget', 'gone', '--json', ...db]);
      expect(JSON.parse(out.pop()!).error).toMatchObject({ code: 'ERR_BUS_STATE', message: expect.stringMatching(/stop it first, or pass --force$/) });
      process.exitCode = undefined;
      await main(['node', 'rea', 'handlers', 'forget', 'gone', '--force', '--json', ...db]);
      expect(JSON.parse(out.pop()!)).toEqual({ handler: 'gone', cancelled: 0 });
      await main(['node', 'rea', 'handlers', 'list', '--json', ...db]);
      expect(JSON.parse(out.pop()!)).toEqual([]);
    } finally {
      vi.restoreAllMocks();
    }
  });
});

describe('the handler heartbeat', () => {
  it.skipIf(!postgresTarget.available)('waits behind a lock on the handlers table with one statement, not one per interval (each holding a pool connection)', async () => {
    const bus = await testBus(postgresTarget, events, { relay: { enabled: false }, worker: { heartbeatMs: 50 }, retention: { enabled: false } });
    bus.on('order.placed', 'sms', () => {});
    await bus.start();
    const beat = `update ${quoteSchema(bus.schema)}.handlers set seen_at`;
    const waiting = async () => (await postgresTarget.query(
      `select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and strpos(query, $1) > 0`, [beat],
    ))[0].n as number;
    // An operator's (or a migration's) lock that blocks updates of handlers, held for 20 intervals.
    const locker = new pg.Client({ connectionString: PG_URL });
    await locker.connect();
    let most = 0;
    try {
      await locker.query('begin');
      await locker.query(`lock table ${quoteSchema(bus.schema)}.handlers in share mode`);
      await expect.poll(waiting, { timeout: 5000 }).toBeGreaterThan(0);
      for (let i = 0; i < 20; i++) {
        await sleep(50);
        most = Math.max(most, await waiting());
      }
      await locker.query('commit');
    } finally {
      await locker.query('rollback').catch(() => {});
      await locker.end();
    }
    // Before: a new beat every 50 ms joined the queue, up to the whole pool (6 here).
    expect(most).toBe(1);
    // Once the lock is gone the beats go on.
    const seen = async () => (await postgresTarget.query(`select seen_at from ${quoteSchema(bus.schema)}.handlers where name = 'sms'`))[0].seen_at as Date;
    const after = await seen();
    await expect.poll(async () => (await seen()).getTime(), { timeout: 5000 }).toBeGreaterThan(after.getTime());
  });
});

it('a heartbeat slower than half the handler_unattended threshold is refused, naming both', () => {
  // Before, createBus took heartbeatMs 20 min beside the 15 min threshold: handler_unattended fired
  // for a handler its running worker had, and forget deleted it without force, every interval.
  const make = (options: object) => () => createBus({ database: { postgres: 'postgres://nobody@127.0.0.1:1/none' }, events, ...options });
  const why = 'or handler_unattended fires (and handlers.forget deletes without force) for handlers a running worker has';
  expect(make({ worker: { heartbeatMs: 20 * 60_000 } })).toThrow(new OptionsError('createBus.worker.heartbeatMs', `1200000 must be at most half of alerts.handlerUnattendedMs (900000, the default), ${why}`));
  expect(make({ worker: { heartbeatMs: 1000 }, alerts: { handlerUnattendedMs: 1999 } })).toThrow(new OptionsError('createBus.worker.heartbeatMs', `1000 must be at most half of alerts.handlerUnattendedMs (1999), ${why}`));
  // The threshold alone, against the default heartbeat: the field given is the one named.
  expect(make({ alerts: { handlerUnattendedMs: 60_000 } })).toThrow(new OptionsError('createBus.alerts.handlerUnattendedMs', `60000 must be at least twice worker.heartbeatMs (60000, the default), ${why}; -1 turns the alert off`));
  expect(make({ worker: { heartbeatMs: 1000 }, alerts: { handlerUnattendedMs: 2000 } })).not.toThrow();
  // The alert off, or a bus that runs no worker (it never beats: an admin process), is not checked.
  expect(make({ worker: { heartbeatMs: 20 * 60_000 }, alerts: { handlerUnattendedMs: -1 } })).not.toThrow();
  expect(make({ worker: { enabled: false }, alerts: { handlerUnattendedMs: 1000 } })).not.toThrow();
  expect(make({})).not.toThrow();
});
