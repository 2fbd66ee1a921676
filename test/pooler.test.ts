// database.pooler and database.listen: rea behind a pooler in transaction mode (a real PgBouncer,
// helpers/pgbouncer.ts, one server connection shared by every client). Unset, rea's prepared
// statements meet other clients' on the shared server session, and it says which setting is
// missing; set, every statement goes unprepared, wake-ups travel on a LISTEN connection straight
// to PostgreSQL (or none at all: polls), and a handler's statement cut off at its timeout is
// cancelled through the pooler.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { createBus, DatabaseError, defineEvents, OptionsError } from '../src/index.js';
import { freshSchema, PG_URL, postgresTarget, testBus } from './helpers/db.js';
import { LISTEN_PROBE_WAIT_MS } from '../src/drivers/postgres/driver.js';
import { rea } from './helpers/cli.js';
import { captureLogger } from './helpers/log.js';
import { pgbouncerAvailable, startPgbouncer, type Bouncer } from './helpers/pgbouncer.js';

const events = defineEvents({ 'order.created': z.object({ orderNo: z.string() }) });

/** Backends whose last statement is the LISTEN of this schema's wake-up channel. */
async function listening(schema: string): Promise<number> {
  const rows = await postgresTarget.query(`select count(*)::int as n from pg_stat_activity where query = $1`, [`LISTEN "rea_${schema}"`]);
  return rows[0].n;
}

describe.runIf(postgresTarget.available && pgbouncerAvailable())('behind PgBouncer in transaction mode', () => {
  let bouncer: Bouncer;
  beforeAll(async () => {
    bouncer = await startPgbouncer();
  });
  afterAll(() => bouncer?.stop());

  it('unset: rea names database.pooler instead of the server\'s "prepared statement already exists", and nothing stored is lost', async () => {
    const bus = await testBus(postgresTarget, events, { database: { postgres: bouncer.url, poolSize: 2 } });
    // Two clients of the application's, one after the other on the pooler's one server session:
    // the first prepares rea's insert there, the second, which never did, prepares it again.
    const record = async (orderNo: string) => {
      const c = new pg.Client({ connectionString: bouncer.url });
      await c.connect();
      try {
        await c.query('begin');
        await bus.record(c, 'order.created', { orderNo });
        await c.query('commit');
      } catch (err) {
        await c.query('rollback').catch(() => {});
        throw err;
      } finally {
        await c.end();
      }
    };
    await record('A1');
    const err = await record('A2').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DatabaseError);
    expect(err).toMatchObject({ kind: 'pooler', code: 'ERR_DATABASE' });
    expect((err as Error).message).toContain("Set database.pooler: 'transaction', with database.listen (rea's CLI: --pooler transaction)");
    expect((err as Error).message).toMatch(/the database said: prepared statement "rea_[0-9a-f]+" already exists$/);
    // Retried, not held against an event or a job (the relay would poison the events it met).
    expect(bus.driver.isTransientError(err)).toBe(true);
    expect(await postgresTarget.query(`select payload->>'orderNo' as o from "${bus.schema}".events`)).toEqual([{ o: 'A1' }]);
  });

  it('the CLI: --pooler transaction (or REA_POOLER) for commands through the pooler; without it, the second command names the flag', async () => {
    const bus = await testBus(postgresTarget, events, { database: { postgres: PG_URL } });
    const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'E1' }));
    await postgresTarget.query(`update "${bus.schema}".events set poisoned_at = now(), fan_attempts = 5, last_error = 'no route' where id = $1`, [id]);
    const requeue = (...flags: string[]) => rea('events', 'requeue', '--database-url', bouncer.url, '--schema', bus.schema, '--poisoned', ...flags);
    // Each command is a process of its own on the pooler's one server session, where the statements
    // an earlier command prepared by name stay.
    expect(await requeue('--pooler', 'transaction')).toMatchObject({ out: `requeued 1 event:\n  ${id}`, code: 0 });
    expect(await requeue('--pooler', 'transaction')).toMatchObject({ out: 'requeued 0 events', code: 0 });
    expect((await requeue()).code).toBe(0);
    const second = await requeue();
    expect(second.code).not.toBe(0);
    expect(second.err).toContain("(rea's CLI: --pooler transaction)");
    vi.stubEnv('REA_POOLER', 'transaction');
    expect(await requeue()).toMatchObject({ code: 0 });
    vi.stubEnv('REA_POOLER', 'session');
    expect(await requeue()).toMatchObject({ code: 2 });
    vi.unstubAllEnvs();
    expect((await requeue('--pooler', 'session')).err).toContain("invalid option --pooler: 'transaction' is the one value (a pooler in session mode needs none), not 'session'");
  });

  it('rea run --wait-for-database ends at once on a pooler it was not told of, naming the setting, rather than waiting as for a database that is down', async () => {
    const bus = await testBus(postgresTarget, events, {});
    // A first process through the pooler leaves rea's statements prepared on its one server session.
    const first = createBus({ database: { postgres: bouncer.url, poolSize: 1 }, schema: bus.schema, events, relay: { enabled: false }, worker: { enabled: false } });
    first.on('order.created', 'noop', () => {});
    await first.start();
    await first.stop();
    const cli = fileURLToPath(new URL('./fixtures/rea-cli.ts', import.meta.url));
    const module = fileURLToPath(new URL('./fixtures/serving-bus.ts', import.meta.url));
    const child = spawn(process.execPath, ['--import', 'tsx', cli, 'run', module, '--wait-for-database', '60000'], {
      stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, REA_FIXTURE_DATABASE_URL: bouncer.url, REA_FIXTURE_SCHEMA: bus.schema },
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const t = Date.now();
    const code = await Promise.race([new Promise((r) => child.on('exit', r)), new Promise((r) => setTimeout(r, 20_000, 'still waiting'))]);
    if (code === 'still waiting') child.kill('SIGKILL');
    // Before: "retrying in 250 ms", 500, 1000… for the whole minute.
    expect(code).toBe(1);
    expect(Date.now() - t).toBeLessThan(15_000);
    expect(stderr).toContain("Set database.pooler: 'transaction'");
    expect(stderr).not.toContain('retrying in');
  }, 30_000);

  it("pooler: 'transaction' with listen straight to PostgreSQL: another process's events reach a plain and a transactional handler once each, woken within ms", async () => {
    const schema = freshSchema();
    // Polls 20-30 s apart: within the test's bounds, only a wake-up delivers.
    const slow = { minPollMs: 20_000, maxPollMs: 30_000 };
    const worker = await testBus(postgresTarget, events, {
      schema, database: { postgres: bouncer.url, poolSize: 3, pooler: 'transaction', listen: PG_URL }, relay: slow, worker: slow,
    });
    await postgresTarget.query(`create table "${schema}".ledger (order_no text primary key)`);
    const seen: string[] = [];
    worker.on('order.created', 'mailer', (e) => void seen.push(e.payload.orderNo));
    worker.on('order.created', 'ledger', async (e, ctx) => {
      await ctx.tx!.query(`insert into "${schema}".ledger values ($1)`, [e.payload.orderNo]);
    }, { transactional: true });
    const errors: string[] = [];
    worker.lifecycle.on('worker:error', (e) => void errors.push(e.error.message));
    worker.lifecycle.on('relay:error', (e) => void errors.push(e.error.message));
    await worker.start();
    expect(await listening(schema)).toBe(1);
    expect(await bouncer.clientNames()).not.toContain('rea-listen');

    const producer = createBus({ database: { postgres: bouncer.url, pooler: 'transaction', listen: PG_URL }, schema, events, relay: { enabled: false }, worker: { enabled: false } });
    try {
      const orders = Array.from({ length: 20 }, (_, i) => `B${i}`);
      for (const orderNo of orders) await producer.transaction((tx) => producer.record(tx, 'order.created', { orderNo }));
      const ledger = async () => (await postgresTarget.query(`select order_no from "${schema}".ledger order by order_no`)).map((r) => r.order_no);
      await expect.poll(ledger, { timeout: 8_000, interval: 50 }).toEqual([...orders].sort());
      await expect.poll(() => [...seen].sort(), { timeout: 2_000, interval: 50 }).toEqual([...orders].sort());
      // Every job's outcome is stored: none is left running or waiting.
      await expect.poll(async () => (await postgresTarget.query(`select count(*)::int as n from "${schema}".jobs where state <> 'completed'`))[0].n, { timeout: 3_000, interval: 50 }).toBe(0);
      expect(errors).toEqual([]);
      // No statement of rea's was prepared by name on the pooler's server session.
      expect(await postgresTarget.query(`select count(*)::int as n from pg_stat_activity a where a.application_name like 'rea%' and a.query like 'EXECUTE%'`)).toEqual([{ n: 0 }]);
    } finally {
      await producer.stop();
    }
  }, 30_000);

  it('a LISTEN that goes through the pooler hears nothing, and rea says so once, naming database.listen; one straight to PostgreSQL does not', async () => {
    const lines: Record<string, unknown>[] = [];
    const through = await testBus(postgresTarget, events, {
      database: { postgres: bouncer.url, pooler: 'transaction', listen: bouncer.url }, logger: captureLogger(lines, { bus: 'through' }),
    });
    const direct = await testBus(postgresTarget, events, {
      database: { postgres: bouncer.url, pooler: 'transaction', listen: PG_URL }, logger: captureLogger(lines, { bus: 'direct' }),
    });
    for (const bus of [through, direct]) bus.on('order.created', 'mailer', () => {});
    await Promise.all([through.start(), direct.start()]);
    const warned = () => lines.filter((l) => String(l.err ?? '').includes('the LISTEN connection did not hear a NOTIFY'));
    // Before: nothing was said, and every wake-up from another process was lost.
    await expect.poll(() => warned().length, { timeout: LISTEN_PROBE_WAIT_MS + 3_000, interval: 100 }).toBe(1);
    expect(warned()[0]).toMatchObject({ level: 'warn', bus: 'through', where: 'listen' });
    // The direct one heard its probe within ms, long before the other's wait ran out.
    expect(warned().filter((l) => l.bus === 'direct')).toEqual([]);
    expect(String(warned()[0]!.err)).toContain('Give database.listen a connection string straight to PostgreSQL (or listen: false)');
  }, 20_000);

  it('listen: false: no LISTEN connection at all, and events are found by polling', async () => {
    const schema = freshSchema();
    const bus = await testBus(postgresTarget, events, {
      schema, database: { postgres: bouncer.url, poolSize: 3, pooler: 'transaction', listen: false },
      relay: { minPollMs: 5, maxPollMs: 100 }, worker: { minPollMs: 5, maxPollMs: 100 },
    });
    const seen: string[] = [];
    bus.on('order.created', 'mailer', (e) => void seen.push(e.payload.orderNo));
    await bus.start();
    // Neither straight to PostgreSQL nor through the pooler (where it would take the server session).
    expect(await listening(schema)).toBe(0);
    expect(await bouncer.clientNames()).not.toContain('rea-listen');
    // Recorded by another process, which rea's process does not hear of.
    const producer = createBus({ database: { postgres: bouncer.url, pooler: 'transaction', listen: false }, schema, events, relay: { enabled: false }, worker: { enabled: false } });
    try {
      await producer.transaction((tx) => producer.record(tx, 'order.created', { orderNo: 'C1' }));
      await expect.poll(() => seen, { timeout: 5_000, interval: 20 }).toEqual(['C1']);
    } finally {
      await producer.stop();
    }
    expect(await listening(schema)).toBe(0);
  }, 20_000);

  it("a transactional handler's statement cut off at its timeout is cancelled through the pooler (a CancelRequest, not pg_cancel_backend of the pooler's pid)", async () => {
    const bus = await testBus(postgresTarget, events, {
      database: { postgres: bouncer.url, poolSize: 3, pooler: 'transaction', listen: PG_URL }, worker: { minPollMs: 5, maxPollMs: 100 },
    });
    const marker = `sleep_${bus.schema}`;
    bus.on('order.created', 'slow', async (_e, ctx) => {
      await ctx.tx!.query(`select pg_sleep(30) as ${marker}`);
    }, { transactional: true, timeoutMs: 300, maxAttempts: 1 });
    const discarded = bus.lifecycle.waitFor('job:discarded', (j) => j.handler === 'slow', 10_000);
    await bus.start();
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'D1' }));
    const sleeping = async () => (await postgresTarget.query(`select count(*)::int as n from pg_stat_activity where state = 'active' and strpos(query, $1) > 0 and pid <> pg_backend_pid()`, [marker]))[0].n;
    await expect.poll(sleeping, { timeout: 5_000, interval: 20 }).toBe(1);
    const job = await discarded;
    expect(job.error).toContain('timed out after 300 ms');
    // Before: pg_cancel_backend of the pid PgBouncer gave the client cancelled nothing, and the
    // pooler's one server session slept on for 30 s, holding up every client.
    await expect.poll(sleeping, { timeout: 2_000, interval: 20 }).toBe(0);
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'D2' }));
  }, 20_000);
});

it('database.pooler and database.listen: checked, and named', () => {
  const make = (database: object) => () => createBus({ database: database as never, events });
  expect(make({ postgres: PG_URL, pooler: 'transaction' })).toThrow(OptionsError);
  expect(make({ postgres: PG_URL, pooler: 'transaction' })).toThrow(/database\.listen: LISTEN does not work through a pooler in transaction mode: pass listen: a connection string straight to PostgreSQL .*or listen: false/);
  expect(make({ postgres: PG_URL, pooler: 'session', listen: false })).toThrow(/database\.pooler: 'transaction' is the one value/);
  expect(make({ postgres: PG_URL, listen: 42 })).toThrow(/database\.listen: pass a postgres:\/\/ connection string straight to PostgreSQL, or false/);
  expect(make({ postgres: PG_URL, listen: '' })).toThrow(/database\.listen/);
  expect(make({ postgres: PG_URL, listen: 'mysql://root@127.0.0.1/test' })).toThrow(/database\.listen/);
  expect(make({ pglite: 'memory://', listen: false })).toThrow(/database: unknown option\(s\) listen|database\.listen/);
  // A password in the listen URL never appears in the message.
  expect(make({ postgres: PG_URL, listen: 'postgres://u:hunter2@[::1' })).toThrow(OptionsError);
  expect(() => make({ postgres: PG_URL, listen: 'postgres://u:hunter2@[::1' })()).not.toThrow(/hunter2/);
});
