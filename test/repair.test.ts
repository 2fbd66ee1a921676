// Repair actions round-trip through the real relay and worker: requeue poisoned events (fan
// attempts reset), retry discarded jobs (attempts extended), and cancel waiting jobs only.
import pg from 'pg';
import { expect, it, onTestFinished } from 'vitest';
import { z } from 'zod';
import { defineEvents, InvalidFilterError, OptionsError, permanent } from '../src/index.js';
import { describeTargets, PG_URL, quickBackoff, testBus } from './helpers/db.js';
import { PostgresOperationsExecutor } from '../src/drivers/postgres/executor-operations.js';
import { OPERATOR_BATCH } from '../src/drivers/postgres/batches.js';
import { quoteSchema } from '../src/drivers/postgres/common.js';
import { PostgresExecutor } from '../src/drivers/postgres/executor.js';
import { postgresStatements } from '../src/drivers/postgres/sql.js';

const events = defineEvents({
  'order.created': z.object({ orderNo: z.string() }),
  'order.paid': z.object({ orderNo: z.string() }),
});

describeTargets('repair on $name', (target) => {
  const test = it.skipIf(!target.available);

  test('events.requeue(ids) resets fan attempts of poisoned rows only, and the relay then fans them', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false }, retention: { enabled: false } });
    const s = bus.schema;
    const [bad, fine] = await bus.transaction(async (tx) => [
      await bus.record(tx, 'order.created', { orderNo: 'P' }),
      await bus.record(tx, 'order.created', { orderNo: 'F' }),
    ]);
    await target.query(`update "${s}".events set poisoned_at = now(), fan_attempts = 5, last_error = 'boom' where id = $1`, [bad]);
    expect(await bus.events.requeue([bad!, fine!])).toEqual([bad]);
    expect(await bus.events.get(bad!)).toMatchObject({ poisonedAt: null, fanAttempts: 0, lastError: null, fannedOutAt: null });
    await bus.relayOnce();
    expect((await bus.events.get(bad!))!.fannedOutAt).toBeInstanceOf(Date);
    expect(await bus.events.requeue({ poisoned: true })).toEqual([]);
  });

  test('events.requeue takes event ids or { poisoned: true } only: anything else is an OptionsError and requeues nothing', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false }, retention: { enabled: false } });
    const s = bus.schema;
    const [a, b] = await bus.transaction(async (tx) => [
      await bus.record(tx, 'order.created', { orderNo: 'A' }),
      await bus.record(tx, 'order.created', { orderNo: 'B' }),
    ]);
    await target.query(`update "${s}".events set poisoned_at = now(), fan_attempts = 5, last_error = 'boom'`);
    // Each of these requeued every poisoned event (anything not an array was taken for
    // { poisoned: true }), or reached the database as a uuid cast error.
    for (const bad of [{ poisoned: false }, a, {}, null, undefined, [a, 'not-an-id'], [42]]) {
      const err = await bus.events.requeue(bad as never).catch((e: unknown) => e);
      expect(err, JSON.stringify(bad)).toBeInstanceOf(OptionsError);
      expect((err as OptionsError).field).toBe('events.requeue');
    }
    expect((await bus.events.list({ state: 'poisoned' })).items).toHaveLength(2);
    expect(await bus.events.requeue([a!.toUpperCase()])).toEqual([a]);
    expect(await bus.events.requeue({ poisoned: true })).toEqual([b]);
  });

  test('events.requeue({ poisoned: true }) goes in bounded batches and requeues every poisoned event once', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false }, retention: { enabled: false } });
    const s = bus.schema;
    const n = OPERATOR_BATCH * 2 + 500;
    // Poisoned at only 7 distinct moments (a relay round poisons rows at one now()): batches end
    // inside runs of equal poisoned_at, where the cursor goes on by id.
    await target.query(
      `insert into "${s}".events (id, type, payload, poisoned_at, fan_attempts, last_error)
       select gen_random_uuid(), 'order.created', '{"orderNo":"P"}', now() - (i % 7) * interval '1 second', 5, 'boom'
       from generate_series(1, $1::int) i`, [n]);
    await target.query(`insert into "${s}".events (id, type, payload) values (gen_random_uuid(), 'order.created', '{"orderNo":"F"}')`);
    const changed: number[] = [];
    const counting = {
      query: async (text: string, params?: unknown[]) => {
        const r = await bus.driver.query<Record<string, unknown>>(text, params);
        const ids = r.rows[0]?.ids;
        changed.push(Array.isArray(ids) ? ids.length : r.rows.length);
        return r;
      },
    } as never;
    const executor = new PostgresExecutor(counting, postgresStatements(quoteSchema(s)));
    const ids = await executor.eventRequeue({ poisoned: true });
    expect(new Set(ids).size).toBe(n);
    // Before, one statement took all of them: every poisoned row locked and returned at once.
    expect(changed).toEqual([OPERATOR_BATCH, OPERATOR_BATCH, 500]);
    expect(await target.query(`select count(*)::int as n from "${s}".events where poisoned_at is not null or fan_attempts <> 0 or last_error is not null`))
      .toEqual([{ n: 0 }]);
    expect(await bus.events.requeue({ poisoned: true })).toEqual([]);
  });

  test('events.get and jobs.forEvent with an id that is not a UUID find nothing, as events.attempts does', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false }, retention: { enabled: false } });
    const [a] = await bus.transaction(async (tx) => [await bus.record(tx, 'order.created', { orderNo: 'A' })]);
    // Before, the id reached the database and came back as its raw uuid cast error.
    for (const id of ['not-an-id', '', 42 as never]) {
      expect(await bus.events.get(id)).toBeNull();
      expect(await bus.jobs.forEvent(id)).toEqual([]);
      expect(await bus.events.attempts(id)).toEqual([]);
    }
    expect(await bus.events.get(a!.toUpperCase())).toMatchObject({ id: a });
  });

  test('jobs.retry({ state: "discarded" }) runs a discarded job again with its attempts extended', async () => {
    const bus = await testBus(target, events);
    let fixed = false;
    const seen: { attempt: number; max: number }[] = [];
    bus.on('order.created', 'erp', (_e, ctx) => {
      seen.push({ attempt: ctx.attempt, max: ctx.maxAttempts });
      if (!fixed) throw permanent(new Error('ERP rejects the order'));
    }, { maxAttempts: 3, backoff: quickBackoff });
    bus.on('order.paid', 'other', () => {
      throw permanent(new Error('other is broken too'));
    });
    await bus.start();
    const discarded = Promise.all([
      bus.lifecycle.waitFor('job:discarded', (j) => j.handler === 'erp'),
      bus.lifecycle.waitFor('job:discarded', (j) => j.handler === 'other'),
    ]);
    const [id] = await bus.transaction(async (tx) => [
      await bus.record(tx, 'order.created', { orderNo: 'R' }),
      await bus.record(tx, 'order.paid', { orderNo: 'R' }),
    ]);
    const [erpJob] = await discarded;
    expect((await bus.overview()).discarded).toBe(2);

    fixed = true;
    const completed = bus.lifecycle.waitFor('job:completed', (j) => j.handler === 'erp');
    // Only the named handler's discarded job.
    expect(await bus.jobs.retry({ state: 'discarded', handler: 'erp' })).toEqual([erpJob.jobId]);
    expect((await completed).attempt).toBe(2);
    expect(seen).toEqual([{ attempt: 1, max: 3 }, { attempt: 2, max: 4 }]);
    const [job] = await bus.jobs.forEvent(id!);
    expect(job).toMatchObject({ state: 'completed', attempt: 2, maxAttempts: 4 });
    expect(job!.errors.map((e) => e.message)).toEqual(['ERP rejects the order']);
    // A completed job is never retried (that would repeat its effect).
    expect(await bus.jobs.retry([erpJob.jobId])).toEqual([]);
    expect((await bus.overview()).discarded).toBe(1);
  });

  test("a retried handler job's schedule starts again: its backoff is given the attempt within the new allowance", async () => {
    // Counted on from the total, the default schedule's first wait after a retry of a 5-attempt
    // job was 5 s × 5^5 (4.3 h), its last ones days: past the consume records' retention.
    const bus = await testBus(target, events);
    // 10 ms after a first attempt, an hour after any later one.
    bus.on('order.created', 'erp', () => {
      throw new Error('ERP down');
    }, { maxAttempts: 2, backoff: (n) => (n === 1 ? 10 : 3_600_000) });
    await bus.start();
    const discarded = bus.lifecycle.waitFor('job:discarded');
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'B' }));
    const { jobId } = await discarded;
    const failed = bus.lifecycle.waitFor('job:failed', (f) => f.jobId === jobId && f.attempt === 3);
    const again = bus.lifecycle.waitFor('job:discarded');
    const t0 = Date.now();
    expect(await bus.jobs.retry([jobId])).toEqual([jobId]);
    expect((await failed).retryAt!.getTime() - t0).toBeLessThan(60_000);
    expect((await again).attempt).toBe(4);
  });

  test('jobs.retry(ids) leaves alone jobs whose event retention removed; bad input names the field', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false }, retention: { enabled: false } });
    const s = bus.schema;
    const [eventId] = await bus.transaction(async (tx) => [await bus.record(tx, 'order.created', { orderNo: 'X' })]);
    const [kept, orphan] = await target.query<{ id: string }>(
      `insert into "${s}".jobs (event_id, kind, target, max_attempts, lease_ms, state, attempt, finalized_at)
       values ($1, 'handler', 'h', 2, 1000, 'discarded', 2, now()), ('00000000-0000-7000-8000-000000000000', 'handler', 'h', 2, 1000, 'cancelled', 1, now())
       returning id::text as id`, [eventId]);
    expect(await bus.jobs.retry([kept!.id, orphan!.id])).toEqual([kept!.id]);
    expect(await bus.driver.operations.jobStates({ ids: [kept!.id, orphan!.id] })).toMatchObject([
      { id: kept!.id, state: 'available', attempt: 2, eventFound: true, waitingJobId: null },
      { id: orphan!.id, state: 'cancelled', attempt: 1, eventFound: false, waitingJobId: null },
    ]);
    // No handlers row for 'h': the job's own allowance is added to its attempts.
    const [row] = await bus.jobs.forEvent(eventId!);
    expect(row).toMatchObject({ attempt: 2, maxAttempts: 4, finalizedAt: null });
    await expect(bus.jobs.retry(['1; drop table x'])).rejects.toThrow(OptionsError);
    await expect(bus.jobs.retry({ state: 'completed' } as never)).rejects.toThrow(/jobs\.retry/);
  });

  test('jobs.retry({ state, handlr }) is InvalidFilterError naming the key, and retries nothing', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false }, retention: { enabled: false } });
    const [eventId] = await bus.transaction(async (tx) => [await bus.record(tx, 'order.created', { orderNo: 'T' })]);
    const jobs = await target.query<{ id: string }>(
      `insert into "${bus.schema}".jobs (event_id, kind, target, max_attempts, lease_ms, state, attempt, finalized_at)
       values ($1, 'handler', 'a', 2, 1000, 'discarded', 2, now()), ($1, 'handler', 'b', 2, 1000, 'discarded', 2, now())
       returning id::text as id`, [eventId]);
    // Before, the misspelt key was ignored and every dead letter of every handler was retried.
    const err = await bus.jobs.retry({ state: 'discarded', handlr: 'a' } as never).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidFilterError);
    expect(err).toMatchObject({ parameter: 'handlr', message: 'invalid filter handlr: is not a retry filter: give state or handler' });
    await expect(bus.jobs.retry({ stat: 'discarded' } as never)).rejects.toMatchObject({ code: 'ERR_INVALID_FILTER', parameter: 'stat' });
    expect((await bus.driver.operations.jobStates({ ids: jobs.map((j) => j.id) })).map((j) => j.state)).toEqual(['discarded', 'discarded']);
  });

  test('jobs.retry never gives a handler a second waiting job for one event (a replay made one, or two dead letters of it)', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false }, retention: { enabled: false } });
    await bus.driver.executor.handlerUpsertMany([
      { name: 'erp', patterns: ['order.created'], coalesceSubject: false, maxAttempts: 5, leaseMs: 35_000, priority: 0 },
      { name: 'crm', patterns: ['order.created'], coalesceSubject: false, maxAttempts: 5, leaseMs: 35_000, priority: 0 },
    ]);
    const [id] = await bus.transaction(async (tx) => [await bus.record(tx, 'order.created', { orderNo: 'D' })]);
    await bus.relayOnce();
    const jobOf = async (handler: string) => (await bus.jobs.forEvent(id!)).filter((j) => j.target === handler).map((j) => j.id);
    const [erp1] = await jobOf('erp');
    const [crm1] = await jobOf('crm');
    expect(await bus.jobs.discard([erp1!, crm1!])).toEqual([erp1, crm1].sort((a, b) => Number(a) - Number(b)));
    // The handler is fixed and the event replayed to it: a new job waits.
    const { jobId: erp2 } = await bus.events.replay(id!, { handler: 'erp' });
    // Retrying the dead letter too would have two jobs of erp for the event run at once, which
    // the replay itself refuses; crm has no other job, so its dead letter goes.
    expect(await bus.jobs.retry([erp1!, crm1!])).toEqual([crm1]);
    expect(await bus.driver.operations.jobStates({ ids: [erp1!] })).toMatchObject([
      { id: erp1, state: 'discarded', attempt: 0, eventFound: true, waitingJobId: erp2 },
    ]);
    // Two dead letters of erp for the event (the original and the replay's): one retry, the newest.
    expect(await bus.jobs.discard([erp2])).toEqual([erp2]);
    expect(await bus.jobs.retry({ state: 'discarded', handler: 'erp' })).toEqual([erp2]);
    expect(await bus.jobs.retry({ state: 'discarded' })).toEqual([]);
    expect((await bus.jobs.forEvent(id!)).filter((j) => j.state === 'available').map((j) => j.id)).toEqual([crm1, erp2].sort((a, b) => Number(a) - Number(b)));
  });

  test('jobs.retry by state goes in bounded batches, oldest first, and retries every dead letter once', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false }, retention: { enabled: false } });
    const s = bus.schema;
    const [eventId] = await bus.transaction(async (tx) => [await bus.record(tx, 'order.created', { orderNo: 'B' })]);
    const n = OPERATOR_BATCH * 2 + 500;
    // First, a batch of dead letters all left alone (each handler has a job waiting for the event):
    // the retry must go on past a batch that retried nothing.
    await target.query(
      `insert into "${s}".jobs (event_id, kind, target, max_attempts, lease_ms, state, attempt, finalized_at)
       select $1::uuid, 'handler', 'x' || i, 5, 1000, 'available', 0, null::timestamptz from generate_series(1, $2::int) i
       union all
       select $1::uuid, 'handler', 'x' || i, 5, 1000, 'discarded', 5, now() from generate_series(1, $2::int) i`, [eventId, OPERATOR_BATCH]);
    // Then one dead letter per handler (a job of each of n handlers), as after an outage of days.
    await target.query(
      `insert into "${s}".jobs (event_id, kind, target, max_attempts, lease_ms, state, attempt, finalized_at)
       select $1, 'handler', 'h' || i, 5, 1000, 'discarded', 5, now() from generate_series(1, $2::int) i`, [eventId, n]);
    // Every retry statement the retry runs (not the ones that lock a batch's events), with how many rows it changed.
    const changed: number[] = [];
    const counting = (q: { query: typeof bus.driver.query }) => ({
      query: async (text: string, params?: unknown[]) => {
        const r = await q.query<Record<string, unknown>>(text, params);
        if (!('ids' in (r.rows[0] ?? {}))) changed.push(r.rows.length);
        return r;
      },
    }) as never;
    const ops = new PostgresOperationsExecutor(counting(bus.driver), s, quoteSchema(s), (fn) => bus.driver.transaction((q) => fn(counting(q))));
    const ids = await ops.jobRetry({ state: 'discarded', webhookMaxAttempts: 18, now: null });
    expect(ids).toHaveLength(n);
    expect(new Set(ids).size).toBe(n);
    // Before, one statement took all of them: every row locked and returned at once.
    expect(Math.max(...changed)).toBe(OPERATOR_BATCH);
    expect(changed).toEqual([0, OPERATOR_BATCH, OPERATOR_BATCH, 500]);
    expect(await target.query(`select state, count(*)::int as n from "${s}".jobs group by state order by state`))
      .toEqual([{ state: 'available', n: n + OPERATOR_BATCH }, { state: 'discarded', n: OPERATOR_BATCH }]);
  });

  it.skipIf(target.name !== 'postgres' || !target.available)('two jobs.retry at once of dead letters of one handler for one event leave one waiting job, not two', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false }, retention: { enabled: false } });
    const s = bus.schema;
    await bus.driver.executor.handlerUpsertMany([{ name: 'erp', patterns: ['order.created'], coalesceSubject: false, maxAttempts: 5, leaseMs: 35_000, priority: 0 }]);
    const [eventId] = await bus.transaction(async (tx) => [await bus.record(tx, 'order.created', { orderNo: 'T' })]);
    await target.query(`update "${s}".events set fanned_out_at = now()`);
    // The original dead letter and a replay's, as two operators see them on their screens.
    const [first, second] = (await target.query<{ id: string }>(
      `insert into "${s}".jobs (event_id, kind, target, max_attempts, lease_ms, state, attempt, finalized_at)
       values ($1, 'handler', 'erp', 5, 1000, 'discarded', 5, now()), ($1, 'handler', 'erp', 5, 1000, 'discarded', 5, now())
       returning id::text as id`, [eventId])).map((r) => r.id);
    // The first retry is held inside its transaction, after its checks, as it makes its job waiting:
    // a trigger waits there for an advisory lock this test holds.
    const holder = new pg.Client({ connectionString: PG_URL });
    await holder.connect();
    onTestFinished(() => holder.end());
    await holder.query('select pg_advisory_lock(4242)');
    await target.query(`
      create function "${s}".hold() returns trigger language plpgsql as $$
      begin
        if new.id = ${Number(first)} and new.state = 'available' then perform pg_advisory_xact_lock_shared(4242); end if;
        return new;
      end $$;
      create trigger hold before update on "${s}".jobs for each row execute function "${s}".hold()`);
    const waiting = async (where: string) => (await holder.query(`select count(*)::int as n from pg_locks where not granted and ${where}`)).rows[0].n > 0;
    const a = bus.jobs.retry([first!]);
    while (!(await waiting(`locktype = 'advisory'`))) await new Promise((r) => setTimeout(r, 5));
    // The second retry either finishes (it did: the first one's job was still dead in its
    // snapshot) or waits for the first one's lock on the event.
    let bDone = false;
    const b = bus.jobs.retry([second!]).finally(() => (bDone = true));
    while (!bDone && !(await waiting(`locktype <> 'advisory'`))) await new Promise((r) => setTimeout(r, 5));
    await holder.query('select pg_advisory_unlock(4242)');
    expect(await a).toEqual([first]);
    expect(await b).toEqual([]);
    expect(await target.query(`select id::text as id from "${s}".jobs where state in ('available', 'retryable', 'running') order by id`)).toEqual([{ id: first }]);
    expect(await bus.driver.operations.jobStates({ ids: [second!] })).toMatchObject([
      { id: second, state: 'discarded', attempt: 5, eventFound: true, waitingJobId: first },
    ]);
  });

  test('jobs.cancel cancels waiting jobs only, and the worker never runs a cancelled job', async () => {
    const bus = await testBus(target, events, { retention: { enabled: false } });
    const s = bus.schema;
    const ran: string[] = [];
    bus.on('order.created', 'ship', (e) => {
      ran.push(e.payload.orderNo);
    });
    await bus.driver.executor.handlerUpsertMany([{ name: 'ship', patterns: ['order.created'], coalesceSubject: false, maxAttempts: 5, leaseMs: 35_000, priority: 0 }]);
    const [a, b] = await bus.transaction(async (tx) => [
      await bus.record(tx, 'order.created', { orderNo: 'A' }),
      await bus.record(tx, 'order.created', { orderNo: 'B' }),
    ]);
    await bus.relayOnce();
    const [jobA] = await bus.jobs.forEvent(a!);
    const [jobB] = await bus.jobs.forEvent(b!);
    const [running, done] = await target.query<{ id: string }>(
      `insert into "${s}".jobs (event_id, kind, target, max_attempts, lease_ms, state, lease_expires_at, finalized_at)
       values ($1, 'handler', 'elsewhere', 5, 1000, 'running', now() + interval '1 hour', null), ($1, 'handler', 'elsewhere', 5, 1000, 'completed', null, now())
       returning id::text as id`, [a]);
    expect(await bus.jobs.cancel([jobA!.id, running!.id, done!.id])).toEqual([jobA!.id]);
    expect((await bus.jobs.forEvent(a!)).find((j) => j.id === jobA!.id)).toMatchObject({ state: 'cancelled', finalizedAt: expect.any(Date) });
    expect((await bus.driver.operations.jobStates({ ids: [running!.id] }))[0]!.state).toBe('running');

    const shipped = bus.lifecycle.waitFor('job:completed', (j) => j.jobId === jobB!.id);
    await bus.start();
    await shipped;
    expect(ran).toEqual(['B']);
    expect((await bus.overview()).jobs.cancelled).toBe(1);
  });
});
