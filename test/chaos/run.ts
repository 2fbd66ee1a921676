// Fault injection: `rea run` worker processes against real PostgreSQL while a producer records
// ~500 events/s; workers are killed with SIGKILL, PostgreSQL is restarted once and rea's
// connections are terminated once. At the end every event must have exactly one transactional
// effect and at least one plain effect, and no job may be stuck. `--short` is the CI mode.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { pino } from 'pino';
import { createBus, defineEvents, type Logger } from '../../src/index.js';
import { z } from 'zod';

const args = new Set(process.argv.slice(2));
const short = args.has('--short');
const restartPostgres = !args.has('--no-restart');
const KILLS = short ? 5 : 50;
const KILL_EVERY_MS = short ? 2500 : 2000;
const RATE = 500;
const WORKERS = 3;
const BASE_URL = process.env.CHAOS_BASE_URL ?? 'postgres://postgres@127.0.0.1:5432';
const DB = 'rea_chaos';
const URL_ = `${BASE_URL}/${DB}`;
const schema = `chaos_${randomBytes(4).toString('hex')}`;
const root = fileURLToPath(new URL('../..', import.meta.url));

const log = (msg: string) => console.error(`[chaos ${new Date().toISOString().slice(11, 23)}] ${msg}`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end().catch(() => {});
  }
}

async function waitForPostgres(deadlineMs = 60_000): Promise<void> {
  const until = Date.now() + deadlineMs;
  for (;;) {
    try {
      await withClient(URL_, (c) => c.query('select 1'));
      return;
    } catch (err) {
      if (Date.now() > until) throw new Error(`PostgreSQL did not come back: ${(err as Error).message}`);
      await sleep(250);
    }
  }
}

// Workers that exited without being told to: a crash (an uncaught error) fails the run.
let crashes = 0;
const expectedExit = new WeakSet<ChildProcess>();

function stopWorker(child: ChildProcess, signal: NodeJS.Signals): void {
  expectedExit.add(child);
  child.kill(signal);
}

function startWorker(n: number): ChildProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', `${root}/bin/rea.js`, 'run', `${root}/test/chaos/bus.ts`, '--stop-timeout', '2000'], {
    cwd: root,
    env: { ...process.env, CHAOS_DATABASE_URL: URL_, CHAOS_SCHEMA: schema, REA_LOG_LEVEL: 'silent' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.on('exit', (code, signal) => {
    if (!expectedExit.has(child)) {
      crashes++;
      log(`worker ${n} exited on its own (code ${code}, signal ${signal})`);
    }
  });
  child.stderr!.on('data', (d: Buffer) => {
    const line = d.toString().trim();
    if (line && !line.startsWith('rea: running') && !line.includes('stopping')) log(`worker ${n}: ${line.slice(0, 300)}`);
  });
  return child;
}

async function main(): Promise<void> {
  const started = Date.now();
  await withClient(`${BASE_URL}/postgres`, async (c) => {
    const { rows } = await c.query('select 1 from pg_database where datname = $1', [DB]);
    if (rows.length === 0) await c.query(`create database ${DB}`);
  });
  const events = defineEvents({ 'chaos.tick': z.object({ seq: z.number().int() }) });
  // The producer records only; workers in child processes do the delivering.
  const producer = createBus({
    database: { postgres: URL_, poolSize: 8 }, schema, events, relay: { enabled: false }, worker: { enabled: false },
    logger: pino({ level: process.env.REA_LOG_LEVEL ?? 'error' }) as unknown as Logger,
  });
  await producer.migrate();
  await withClient(URL_, (c) => c.query(`
    create table "${schema}".chaos_counts (event_id uuid primary key, n int not null);
    create table "${schema}".chaos_appends (event_id uuid not null);`));

  const workers: ChildProcess[] = [];
  for (let i = 0; i < WORKERS; i++) workers.push(startWorker(i));

  const acknowledged = new Set<string>();
  let ambiguous = 0;
  let producing = true;
  let seq = 0;
  const produce = (async () => {
    const gap = 1000 / RATE;
    let next = performance.now();
    const inflight = new Set<Promise<void>>();
    while (producing) {
      const s = seq++;
      const p = producer
        .transaction((tx) => producer.record(tx, 'chaos.tick', { seq: s }))
        .then((id) => void acknowledged.add(id))
        .catch(() => void ambiguous++) // failed or unknown commit: may or may not be stored
        .finally(() => inflight.delete(p));
      inflight.add(p);
      if (inflight.size >= 16) await Promise.race(inflight);
      next += gap;
      const wait = next - performance.now();
      if (wait > 0) await sleep(wait);
      else if (wait < -1000) next = performance.now(); // fell behind (database down): don't burst
    }
    await Promise.all(inflight);
  })();

  // Faults.
  let kills = 0;
  const restartAt = Math.floor(KILLS / 2);
  const terminateAt = Math.max(1, Math.floor(KILLS / 4));
  while (kills < KILLS) {
    await sleep(KILL_EVERY_MS * (0.5 + Math.random()));
    const i = Math.floor(Math.random() * workers.length);
    stopWorker(workers[i]!, 'SIGKILL');
    workers[i] = startWorker(i);
    kills++;
    log(`kill -9 #${kills} (worker ${i}); acknowledged ${acknowledged.size}`);
    if (kills === terminateAt) {
      const n = await withClient(URL_, (c) => c.query(
        `select count(pg_terminate_backend(pid))::int as n from pg_stat_activity where application_name in ('rea', 'rea-listen') and pid <> pg_backend_pid()`,
      ).then((r) => r.rows[0].n as number)).catch(() => 0);
      log(`pg_terminate_backend: ${n} rea connections terminated`);
    }
    if (kills === restartAt && restartPostgres) {
      const version = readdirSync('/etc/postgresql')[0]!;
      log(`restarting PostgreSQL ${version}`);
      execFileSync('pg_ctlcluster', ['--skip-systemctl-redirect', version, 'main', 'restart', '-m', 'fast'], { stdio: 'inherit' });
      await waitForPostgres();
      log('PostgreSQL is back');
    }
  }
  producing = false;
  await produce;
  const produceEnded = Date.now();
  log(`producer stopped: ${acknowledged.size} acknowledged, ${ambiguous} failed or ambiguous commits`);

  // Drain.
  const stats = async () => withClient(URL_, async (c) => {
    const { rows } = await c.query(`select
      (select count(*) from "${schema}".events where fanned_out_at is null)::int as unfanned,
      (select count(*) from "${schema}".jobs where state in ('available', 'retryable', 'running'))::int as open_jobs`);
    return rows[0] as { unfanned: number; open_jobs: number };
  });
  const drainDeadline = Date.now() + 180_000;
  for (;;) {
    const s = await stats().catch(() => ({ unfanned: -1, open_jobs: -1 }));
    if (s.unfanned === 0 && s.open_jobs === 0) break;
    if (Date.now() > drainDeadline) {
      log(`did not drain: ${JSON.stringify(s)}`);
      break;
    }
    await sleep(250);
  }
  const drainMs = Date.now() - produceEnded;
  for (const w of workers) stopWorker(w, 'SIGTERM');
  await Promise.all(workers.map((w) => new Promise((r) => (w.exitCode !== null ? r(null) : w.once('exit', r)))));

  const result = await withClient(URL_, async (c) => {
    const q = async <K extends string>(sql: string) => (await c.query(sql)).rows[0] as Record<K, number>;
    const stored = await q<'n'>(`select count(*)::int as n from "${schema}".events`);
    const counts = await q<'missing_counter' | 'duplicate_counter'>(`select
      count(*) filter (where c.n is null)::int as missing_counter,
      count(*) filter (where c.n > 1)::int as duplicate_counter
      from "${schema}".events e left join "${schema}".chaos_counts c on c.event_id = e.id`);
    const appends = await q<'missing_append' | 'redelivered'>(`select
      count(*) filter (where a.k is null)::int as missing_append,
      coalesce(sum(a.k - 1) filter (where a.k > 1), 0)::int as redelivered
      from "${schema}".events e
      left join (select event_id, count(*)::int as k from "${schema}".chaos_appends group by event_id) a on a.event_id = e.id`);
    const stuck = await q<'n'>(`select count(*)::int as n from "${schema}".jobs where state in ('running', 'available', 'retryable')`);
    const discarded = await q<'n'>(`select count(*)::int as n from "${schema}".jobs where state = 'discarded'`);
    // Appends made inline, in relay rounds (no job row): the run covers that path too.
    const inline = await q<'n'>(`select count(*)::int as n from "${schema}".events where 'append' = any (delivered_inline)`);
    const ids = (await c.query(`select id::text as id from "${schema}".events`)).rows.map((r) => r.id as string);
    const storedIds = new Set(ids);
    const lostAcknowledged = [...acknowledged].filter((id) => !storedIds.has(id)).length;
    return { stored: stored.n, ...counts, ...appends, stuck: stuck.n, discarded: discarded.n, deliveredInline: inline.n, lostAcknowledged };
  });

  const lost = result.lostAcknowledged + result.missing_counter + result.missing_append;
  const summary = {
    mode: short ? 'short' : 'full', schema, kills, postgresRestarted: restartPostgres, acknowledged: acknowledged.size,
    ambiguousCommits: ambiguous, stored: result.stored, lost, duplicateEffects: result.duplicate_counter,
    redelivered: result.redelivered, deliveredInline: result.deliveredInline, stuckJobs: result.stuck, discardedJobs: result.discarded, workerCrashes: crashes, drainMs,
    totalMs: Date.now() - started,
  };
  console.log(JSON.stringify(summary));
  await producer.stop();
  const failed = lost > 0 || summary.duplicateEffects > 0 || summary.stuckJobs > 0 || summary.discardedJobs > 0 || crashes > 0;
  if (!failed) await withClient(URL_, (c) => c.query(`drop schema "${schema}" cascade`));
  if (failed) {
    console.error('chaos: FAILED (lost, duplicated, stuck or discarded work, or a crashed worker); schema kept for inspection: ' + schema);
    process.exit(1);
  }
  console.error('chaos: passed');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
