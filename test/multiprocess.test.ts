// Several processes on one PostgreSQL: a worker killed with SIGKILL mid-handler loses nothing,
// and concurrent migrators do not trip over each other.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createBus, defineEvents } from '../src/index.js';
import { freshSchema, PG_URL, postgresTarget } from './helpers/db.js';

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
});
