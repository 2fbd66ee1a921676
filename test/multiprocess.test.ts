// Several processes on one PostgreSQL: a worker killed with SIGKILL mid-handler loses nothing,
// and concurrent migrators do not trip over each other.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createBus, defineEvents } from '../src/index.js';
import { migrations } from '../src/drivers/postgres/migrations/index.js';
import { freshSchema, PG_URL, postgresTarget } from './helpers/db.js';
import { captureLogger } from './helpers/log.js';

const child = fileURLToPath(new URL('./fixtures/child-bus.ts', import.meta.url));
const events = defineEvents({ 'order.created': z.object({ orderNo: z.string() }) });

function run(mode: string, schema: string): ChildProcess {
  return spawn(process.execPath, ['--import', 'tsx', child, mode, PG_URL, schema], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, REA_LOG_LEVEL: 'silent' },
  });
}

function waitForLine(proc: ChildProcess, match: RegExp): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    let buf = '';
    const onData = (chunk: Buffer) => {
      buf += chunk.toString();
      const m = buf.match(match);
      if (m) {
        proc.stdout!.off('data', onData);
        resolve(m);
      }
    };
    proc.stdout!.on('data', onData);
    proc.once('exit', (code) => reject(new Error(`child exited with ${code} before printing ${match}`)));
  });
}

describe.skipIf(!postgresTarget.available)('multiple processes on postgres', () => {
  it('a worker killed with SIGKILL mid-handler: its job is rescued and completes elsewhere', async () => {
    const schema = freshSchema();
    const bus = createBus({
      database: { postgres: PG_URL, poolSize: 4 }, schema, events,
      worker: { leaseMarginMs: 100 }, leader: { ttlMs: 1000, renewMs: 300 }, rescuer: { intervalMs: 200 },
    });
    try {
      await bus.migrate();
      const victim = run('hang', schema);
      await waitForLine(victim, /ready/);
      const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'K1' }));
      // The victim has no rival yet, so it claims the job; this bus only records until now.
      const [, startedId] = (await waitForLine(victim, /started (\S+)/))!;
      expect(startedId).toBe(id);
      victim.kill('SIGKILL');
      await once(victim, 'exit');

      const attempts: number[] = [];
      bus.on('order.created', 'slow', (_e, ctx) => {
        attempts.push(ctx.attempt);
      }, { timeoutMs: 400 });
      const rescued = bus.lifecycle.waitFor('jobs:rescued', () => true, 15_000);
      const completed = bus.lifecycle.waitFor('job:completed', (j) => j.eventId === id, 15_000);
      await bus.start();
      expect((await rescued).rescued).toBe(1);
      expect((await completed).attempt).toBe(2);
      expect(attempts).toEqual([2]);
      const [job] = await bus.jobs.forEvent(id);
      expect(job!.state).toBe('completed');
      expect(job!.errors.map((e) => e.name)).toEqual(['LeaseExpired']);
    } finally {
      await bus.stop();
      await postgresTarget.query(`drop schema if exists "${schema}" cascade`);
    }
  });

  it('concurrent migrate() from two processes applies each migration once', async () => {
    const schema = freshSchema();
    try {
      const procs = [run('migrate', schema), run('migrate', schema), run('migrate', schema)];
      const outputs = await Promise.all(procs.map((p) => waitForLine(p, /\{.*\}/).then((m) => JSON.parse(m[0]) as { applied: number[] })));
      const codes = await Promise.all(procs.map((p) => (p.exitCode !== null ? p.exitCode : once(p, 'exit').then(([c]) => c))));
      expect(codes).toEqual([0, 0, 0]);
      const appliedAll = outputs.flatMap((o) => o.applied).sort();
      const versions = await postgresTarget.query<{ version: number }>(`select version from "${schema}".migrations order by version`);
      // Every version applied by exactly one of the processes.
      expect(appliedAll).toEqual(versions.map((v) => v.version).sort());
      expect(versions.length).toBeGreaterThanOrEqual(1);
    } finally {
      await postgresTarget.query(`drop schema if exists "${schema}" cascade`);
    }
  });

  it('an upgrade on a live database never holds the application\'s writes up behind a migration waiting for a lock', async () => {
    // A schema an older rea made (migrations up to 6), with an event waiting; a business
    // transaction that recorded an event and has not committed holds the events table. Migration 7
    // alters that table: its ALTER queued for the lock, and every insert into events after it (each
    // record(), each business commit) waited behind it, for as long as that transaction lasted.
    const schema = freshSchema();
    const s = `"${schema}"`;
    const holder = new pg.Client({ connectionString: PG_URL, application_name: 'slow-business' });
    const writer = new pg.Client({ connectionString: PG_URL });
    await holder.connect();
    await writer.connect();
    const lines: Record<string, unknown>[] = [];
    const bus = createBus({ database: { postgres: PG_URL, poolSize: 2 }, schema, events, logger: captureLogger(lines) });
    try {
      await postgresTarget.query(`create schema ${s}; create table ${s}.migrations (version integer primary key, name text not null, applied_at timestamptz not null default now())`);
      for (const m of migrations.filter((mig) => mig.version <= 6)) {
        await postgresTarget.query(m.sql.replaceAll('{schema}', s));
        await postgresTarget.query(`insert into ${s}.migrations (version, name) values ($1, $2)`, [m.version, m.name]);
      }
      const insert = `insert into ${s}.events (id, type, payload) values (gen_random_uuid(), 'order.created', '{"orderNo":"A1"}')`;
      await writer.query(insert);
      await holder.query('begin');
      await holder.query(insert);
      const migrated = bus.migrate();
      await expect.poll(() => lines.some((l) => String(l.msg).startsWith('a migration waited for a lock')), { timeout: 10_000 }).toBe(true);
      expect(lines.find((l) => String(l.msg).startsWith('a migration waited'))).toMatchObject({
        level: 'warn', schema, migration: '7 (delivered_inline)', held_by: expect.stringMatching(/^pid \d+ \(application 'slow-business', idle in transaction, in a transaction for \d+ s\)$/),
      });
      // The application records on while the migration waits.
      await writer.query(`set statement_timeout = 5000`);
      for (let i = 0; i < 3; i++) await writer.query(insert);
      await holder.query('commit');
      expect((await migrated).applied).toEqual(migrations.filter((mig) => mig.version > 6).map((mig) => mig.version));

      // A transaction that never ends: migrate() gives up, naming it, and changes nothing.
      await postgresTarget.query(`delete from ${s}.migrations where version >= 7; alter table ${s}.events drop column delivered_inline; alter table ${s}.events_archive drop column delivered_inline; drop table ${s}.admin_sessions_ended`);
      await holder.query('begin');
      await holder.query(insert);
      const err = await bus.driver.migrate({ lockWaitMs: 1500 }).then(() => null, (e: unknown) => e as Error & { code: string });
      expect(err).toMatchObject({ code: 'ERR_MIGRATION', message: expect.stringMatching(new RegExp(`^migration 7 \\(delivered_inline\\) in schema ${schema} could not take its lock on rea's tables in \\d+ s \\(\\d+ tries of 1 s each, so the application's writes were never held up longer\\): held by pid \\d+ \\(application 'slow-business', idle in transaction`)) });
      expect((await postgresTarget.query(`select max(version)::int as v from ${s}.migrations`))[0].v).toBe(6);
      await holder.query('commit');
    } finally {
      await bus.stop();
      await holder.end();
      await writer.end();
      await postgresTarget.query(`drop schema if exists ${s} cascade`);
    }
  });
});
