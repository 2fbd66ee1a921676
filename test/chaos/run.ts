// Fault injection: `rea run` worker processes against real PostgreSQL while a producer records
// events at ~500/s (the rate asked for; the summary's producedPerSecond is the rate reached, far
// less on a machine of two cores while the faults run); workers are killed with SIGKILL,
// PostgreSQL is restarted once and rea's connections are terminated once. At the end every event
// must have exactly one transactional effect and at least one plain effect, and no job may be
// stuck. `--short` is the CI mode.
//
// Alongside, on a schema of its own, a second group of workers (test/chaos/bus-lean.ts) takes
// ~200 events/s whose only handler is a plain one, so their rounds run the lean inline path (the
// handler inside the relay's open transaction, no job row) under the same faults: every such
// event must have at least one effect, nothing may be stuck, and some of its deliveries must have
// been inline on both sides of the PostgreSQL restart (LEAN_INLINE_MIN in verdict.ts), or the run
// did not test that path and fails.
//
// A writing transaction is held open through the first half of the faults (openLongTransaction):
// its events are stored with ids and times from the run's start, become visible only when it
// commits, behind thousands of newer ones, and must be delivered like any other; meanwhile its
// transaction id holds back PostgreSQL's xmin horizon, so none of the run's dead rows is vacuumed.
//
// The main group's workers also deliver webhooks: ~20 events/s of a type no handler takes go to an
// endpoint served by this process (src/cli/local-receiver.ts), which checks every delivery's
// signature. Each such event must reach it at least once, and none with a bad signature.
//
// The workers reach PostgreSQL through a proxy (test/chaos/proxy.ts). After the last kill it stages
// a failover: every connection they hold goes silent, neither answering nor closing, as when a
// server's address moves to a new primary. Each worker must notice within its deadline
// (database.queryTimeoutMs), carry on over new connections, and run each stage of delivery again
// within FAILOVER_RECOVERY_MAX_MS (FAILOVER_STAGES, verdict.ts); before that deadline, they waited
// for TCP, ~15 minutes.
//
// The workers run `bin/rea.js`, which loads the build in dist/ (`npm run chaos` builds it first),
// on their bus compiled to JavaScript (test/chaos/.build/, by tsc at the run's start), as a
// deployment runs them. Under the tsx loader each of the full mode's 50 restarts cost ~1 s more of
// CPU, on a machine of two cores the workers share with PostgreSQL and the producers.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { pino } from 'pino';
import { startLocalReceiver } from '../../src/cli/local-receiver.js';
import { createBus, defineEvents, type Logger } from '../../src/index.js';
import { z } from 'zod';
import { failures, type FailoverStage } from './verdict.js';

const args = new Set(process.argv.slice(2));
const short = args.has('--short');
const restartPostgres = !args.has('--no-restart');
const KILLS = short ? 5 : 50;
const KILL_EVERY_MS = short ? 2500 : 2000;
const RATE = 500;
const WORKERS = 3;
const LEAN_RATE = 200;
const LEAN_WORKERS = 2;
/**
 * Events a second of the type only a webhook endpoint takes (its receiver is in main()). A
 * delivery costs far more than a handler's job (an HTTP request, its signature, an attempt row),
 * and the two cores are already saturated while the faults run: the other producers fall short of
 * their rates (the summary's producedPerSecond; the README gives the range).
 */
const HOOK_RATE = 20;
/** How long the producers go on after the failover: the events the workers must deliver over new connections. */
const AFTER_FAILOVER_MS = 4000;
/** Events recorded by the transaction held open through the first half of the faults (openLongTransaction). */
const LONG_TX_EVENTS = 50;
/** How long a worker may take to exit after SIGTERM at the end: its --stop-timeout (2 s) and a wide margin. */
const STOP_DEADLINE_MS = 20_000;
const BASE_URL = process.env.CHAOS_BASE_URL ?? 'postgres://postgres@127.0.0.1:5432';
const DB = 'rea_chaos';
const URL_ = `${BASE_URL}/${DB}`;
const schema = `chaos_${randomBytes(4).toString('hex')}`;
const leanSchema = `${schema}_lean`;
const root = fileURLToPath(new URL('../..', import.meta.url));
/** Each worker's whole stderr, one file per start (the log above shows only the first 300 characters of a chunk). */
const logDir = `${tmpdir()}/rea-chaos-${schema}`;
mkdirSync(logDir, { recursive: true });
let starts = 0;

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

/** test/chaos/proxy.ts in a process of its own, in front of `upstream`. */
async function startProxy(upstream: string): Promise<{ url: string; failover(): Promise<number>; close(): void }> {
  const child = spawn(process.execPath, ['--import', 'tsx', `${root}/test/chaos/proxy.ts`, upstream], { cwd: root, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const url = await new Promise<string>((resolve, reject) => {
    child.once('message', (m) => resolve((m as { url: string }).url));
    child.once('exit', (code) => reject(new Error(`the chaos proxy exited (code ${code}) before it listened`)));
  });
  return {
    url,
    failover: () => new Promise<number>((resolve) => {
      child.once('message', (m) => resolve((m as { silenced: number }).silenced));
      child.send('failover');
    }),
    close: () => child.disconnect(),
  };
}

/** The workers' buses as JavaScript (see the top of this file); `rea` resolves to dist/ from there, as from the sources. */
const workerBuild = `${root}/test/chaos/.build`;
execFileSync(process.execPath, [createRequire(import.meta.url).resolve('typescript/bin/tsc'), '-p', `${root}/test/chaos/tsconfig.workers.json`], { stdio: 'inherit' });

/** Resolves once the worker says it runs (its relay and worker have started). */
const readiness = new WeakMap<ChildProcess, Promise<void>>();

/** Worker n: the first WORKERS run test/chaos/bus.ts (its build), the LEAN_WORKERS after them bus-lean.ts; through the proxy at `url`. */
function startWorker(n: number, url: string): ChildProcess {
  const lean = n >= WORKERS;
  const child = spawn(process.execPath, [`${root}/bin/rea.js`, 'run', `${workerBuild}/${lean ? 'bus-lean' : 'bus'}.js`, '--stop-timeout', '2000'], {
    cwd: root,
    env: { ...process.env, CHAOS_DATABASE_URL: url, CHAOS_EFFECTS_URL: URL_, CHAOS_SCHEMA: lean ? leanSchema : schema, REA_LOG_LEVEL: process.env.CHAOS_WORKER_LOG ?? 'silent' },
    stdio: ['ignore', process.env.CHAOS_WORKER_LOG ? 'pipe' : 'ignore', 'pipe'],
  });
  child.on('exit', (code, signal) => {
    if (!expectedExit.has(child)) {
      crashes++;
      log(`worker ${n} exited on its own (code ${code}, signal ${signal})`);
    }
  });
  let ready!: () => void;
  readiness.set(child, new Promise<void>((resolve) => (ready = resolve)));
  const file = createWriteStream(`${logDir}/worker-${n}-start-${++starts}.log`);
  child.stderr!.pipe(file);
  child.stdout?.pipe(file);
  child.stderr!.on('data', (d: Buffer) => {
    const line = d.toString().trim();
    if (line.includes('rea: running')) ready();
    // rea's log lines (JSON, on stderr too, with CHAOS_WORKER_LOG) go to the file only.
    const said = line.split('\n').filter((l) => !l.startsWith('{"level"')).join('\n').trim();
    if (said && !said.startsWith('rea: running') && !said.includes('stopping')) log(`worker ${n}: ${said.slice(0, 300)}`);
  });
  return child;
}

/**
 * Records events of `type` at `rate` per second, each in its own transaction, until stop();
 * acknowledged holds the ids whose commit succeeded, ambiguous counts the failed or unknown ones.
 */
function produce(bus: ReturnType<typeof createBus<any>>, type: string, rate: number) {
  const acknowledged = new Set<string>();
  let ambiguous = 0;
  let producing = true;
  let seq = 0;
  const done = (async () => {
    const gap = 1000 / rate;
    let next = performance.now();
    const inflight = new Set<Promise<void>>();
    while (producing) {
      const s = seq++;
      const p = bus
        .transaction((tx) => bus.record(tx, type, { seq: s }))
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
  return {
    acknowledged,
    get ambiguous() { return ambiguous; },
    async stop() {
      producing = false;
      await done;
    },
  };
}

/**
 * A transaction that records LONG_TX_EVENTS events and stays open until commit() (a batch import,
 * a migration, a report that writes): on a client of its own, straight to PostgreSQL (not through
 * the workers' proxy) and under an application name of its own (pg_terminate_backend is aimed at
 * rea's connections). Its events have ids and creation times from when it opened, and no other
 * transaction sees them before it commits; its transaction id holds PostgreSQL's xmin horizon back
 * all the while, in every database of the cluster.
 */
async function openLongTransaction(bus: ReturnType<typeof createBus<any>>, type: string) {
  const client = new pg.Client({ connectionString: URL_, application_name: 'rea-chaos-long' });
  await client.connect();
  await client.query('begin');
  const openedAt = Date.now();
  const ids = await bus.recordMany(client, Array.from({ length: LONG_TX_EVENTS }, (_, i) => ({ type, payload: { seq: -1 - i } })));
  return {
    /** The ids it committed (none when the commit failed) and how long it was open. */
    async commit(): Promise<{ committed: string[]; heldMs: number }> {
      try {
        await client.query('commit');
        return { committed: ids, heldMs: Date.now() - openedAt };
      } catch (err) {
        log(`the long transaction did not commit: ${(err as Error).message}`);
        return { committed: [], heldMs: Date.now() - openedAt };
      } finally {
        await client.end().catch(() => {});
      }
    },
  };
}

async function main(): Promise<void> {
  const started = Date.now();
  await withClient(`${BASE_URL}/postgres`, async (c) => {
    const { rows } = await c.query('select 1 from pg_database where datname = $1', [DB]);
    if (rows.length === 0) await c.query(`create database ${DB}`);
  });
  const logger = pino({ level: process.env.REA_LOG_LEVEL ?? 'error' }) as unknown as Logger;
  // The producers record only; workers in child processes do the delivering.
  const producer = createBus({
    database: { postgres: URL_, poolSize: 8 }, schema,
    events: defineEvents({ 'chaos.tick': z.object({ seq: z.number().int() }) }),
    relay: { enabled: false }, worker: { enabled: false }, logger,
  });
  // The webhook's events, on the main group's schema, through a pool of their own: they neither
  // wait for the ticks' connections nor take theirs.
  const hookProducer = createBus({
    database: { postgres: URL_, poolSize: 2 }, schema, events: defineEvents({ 'chaos.hook': z.object({ seq: z.number().int() }) }),
    relay: { enabled: false }, worker: { enabled: false }, logger,
    // Its endpoint is this process's receiver, on loopback (refused by default, as the workers' deliveries).
    webhooks: { allowPrivateNetworks: true },
  });
  const leanProducer = createBus({
    database: { postgres: URL_, poolSize: 4 }, schema: leanSchema, events: defineEvents({ 'chaos.lean': z.object({ seq: z.number().int() }) }),
    relay: { enabled: false }, worker: { enabled: false }, logger,
  });
  await producer.migrate();
  await leanProducer.migrate();
  await withClient(URL_, (c) => c.query(`
    create table "${schema}".chaos_counts (event_id uuid primary key, n int not null);
    create table "${schema}".chaos_appends (event_id uuid not null, at timestamptz not null default clock_timestamp());
    create table "${leanSchema}".chaos_marks (event_id uuid not null);`));
  // The main group's webhook endpoint: counts, by event id, the deliveries whose signature verified.
  const received = new Map<string, number>();
  const receiver = await startLocalReceiver('/chaos', (body) => {
    const { id } = JSON.parse(body) as { id: string };
    received.set(id, (received.get(id) ?? 0) + 1);
  });
  receiver.secret = (await hookProducer.endpoints.create({ url: receiver.url, eventTypes: ['chaos.hook'], description: 'chaos receiver' })).secret;

  const proxy = await startProxy(URL_);
  const workers: ChildProcess[] = [];
  for (let i = 0; i < WORKERS + LEAN_WORKERS; i++) workers.push(startWorker(i, proxy.url));
  // Faults, not start-up, are under test: events recorded before any worker runs would only be a
  // backlog, fanned out to job rows, not the inline rounds the lean group is there for.
  await Promise.race([Promise.all(workers.map((w) => readiness.get(w))), sleep(60_000).then(() => { throw new Error('the workers did not start within 60 s'); })]);

  const produceStarted = Date.now();
  const ticks = produce(producer, 'chaos.tick', RATE);
  const leans = produce(leanProducer, 'chaos.lean', LEAN_RATE);
  const hooks = produce(hookProducer, 'chaos.hook', HOOK_RATE);
  const acknowledged = ticks.acknowledged;
  const longTransaction = await openLongTransaction(producer, 'chaos.tick');
  let longCommit: { committed: string[]; heldMs: number } | undefined;
  const commitLong = async () => {
    longCommit = await longTransaction.commit();
    for (const id of longCommit.committed) acknowledged.add(id);
    log(`the long transaction committed ${longCommit.committed.length} events after ${longCommit.heldMs} ms`);
  };

  // Faults.
  let kills = 0;
  const restartAt = Math.floor(KILLS / 2);
  let restartedAt: Date | undefined;
  let backAt: Date | undefined;
  const terminateAt = Math.max(1, Math.floor(KILLS / 4));
  while (kills < KILLS) {
    await sleep(KILL_EVERY_MS * (0.5 + Math.random()));
    const i = Math.floor(Math.random() * workers.length);
    stopWorker(workers[i]!, 'SIGKILL');
    workers[i] = startWorker(i, proxy.url);
    kills++;
    log(`kill -9 #${kills} (worker ${i}); acknowledged ${acknowledged.size}`);
    if (kills === terminateAt) {
      const n = await withClient(URL_, (c) => c.query(
        `select count(pg_terminate_backend(pid))::int as n from pg_stat_activity where application_name in ('rea', 'rea-listen') and pid <> pg_backend_pid()`,
      ).then((r) => r.rows[0].n as number)).catch(() => 0);
      log(`pg_terminate_backend: ${n} rea connections terminated`);
    }
    // Committed before the restart would end it, after half of the kills (and the termination).
    if (kills === restartAt) await commitLong();
    if (kills === restartAt && restartPostgres) {
      const version = readdirSync('/etc/postgresql')[0]!;
      log(`restarting PostgreSQL ${version}`);
      restartedAt = new Date();
      execFileSync('pg_ctlcluster', ['--skip-systemctl-redirect', version, 'main', 'restart', '-m', 'fast'], { stdio: 'inherit' });
      await waitForPostgres();
      backAt = new Date();
      log('PostgreSQL is back');
    }
  }
  // The failover, after the last kill and once every worker runs (one still starting would open
  // its connections after it, and carry the run alone): each must get through it on its own.
  await Promise.race([Promise.all(workers.map((w) => readiness.get(w))), sleep(60_000).then(() => { throw new Error('the workers did not start within 60 s'); })]);
  await sleep(500);
  const silenced = await proxy.failover();
  // Taken once the proxy has silenced every connection (it answers after): a statement that ran
  // after this can only have gone over a new one. Taken before, a commit on its way through the
  // proxy in between counted as a stage run again (a plain handler's write 1 ms after).
  const failedOverAt = new Date();
  log(`failover: ${silenced} worker connections left silent; new ones reach the server`);
  await sleep(AFTER_FAILOVER_MS);
  await Promise.all([ticks.stop(), leans.stop(), hooks.stop()]);
  const produceEnded = Date.now();
  // The rates reached (the long transaction's events apart), against the ones asked for: on a
  // machine whose cores the workers and PostgreSQL saturate while the faults run, the producers
  // fall behind (the README says by how much).
  const perSecond = (n: number) => Math.round(n / ((produceEnded - produceStarted) / 1000));
  const producedPerSecond = { ticks: perSecond(acknowledged.size - (longCommit?.committed.length ?? 0)), lean: perSecond(leans.acknowledged.size), webhooks: perSecond(hooks.acknowledged.size) };
  log(`producers stopped: ${acknowledged.size} + ${leans.acknowledged.size} (lean) acknowledged, ${ticks.ambiguous + leans.ambiguous} failed or ambiguous commits; ${hooks.acknowledged.size} for the webhook; `
    + `per second ${producedPerSecond.ticks} of ${RATE}, ${producedPerSecond.lean} of ${LEAN_RATE} (lean), ${producedPerSecond.webhooks} of ${HOOK_RATE} (webhook)`);

  // Drain.
  const stats = async () => withClient(URL_, async (c) => {
    const { rows } = await c.query(`select
      (select count(*) from "${schema}".events where fanned_out_at is null)::int
        + (select count(*) from "${leanSchema}".events where fanned_out_at is null)::int as unfanned,
      (select count(*) from "${schema}".jobs where state in ('available', 'retryable', 'running'))::int
        + (select count(*) from "${leanSchema}".jobs where state in ('available', 'retryable', 'running'))::int as open_jobs`);
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
  // Each worker has --stop-timeout 2000; one still alive well after that did not stop on SIGTERM
  // (it would keep a deployment's old pod alive): it fails the run, and is killed so the run ends.
  for (const w of workers) stopWorker(w, 'SIGTERM');
  const exited = (w: ChildProcess) => new Promise<true>((r) => (w.exitCode !== null || w.signalCode !== null ? r(true) : w.once('exit', () => r(true))));
  let hungAtStop = 0;
  await Promise.all(workers.map(async (w, n) => {
    if (await Promise.race([exited(w), sleep(STOP_DEADLINE_MS).then(() => false as const)])) return;
    hungAtStop++;
    log(`worker ${n} still running ${STOP_DEADLINE_MS} ms after SIGTERM; killing it`);
    w.kill('SIGKILL');
    await exited(w);
  }));

  const result = await withClient(URL_, async (c) => {
    const q = async <K extends string>(sql: string) => (await c.query(sql)).rows[0] as Record<K, number>;
    // The handlers take chaos.tick alone (chaos.hook goes to the webhook endpoint: below).
    const stored = await q<'n'>(`select count(*)::int as n from "${schema}".events where type = 'chaos.tick'`);
    const counts = await q<'missing_counter' | 'duplicate_counter'>(`select
      count(*) filter (where c.n is null)::int as missing_counter,
      count(*) filter (where c.n > 1)::int as duplicate_counter
      from "${schema}".events e left join "${schema}".chaos_counts c on c.event_id = e.id where e.type = 'chaos.tick'`);
    const appends = await q<'missing_append' | 'redelivered'>(`select
      count(*) filter (where a.k is null)::int as missing_append,
      coalesce(sum(a.k - 1) filter (where a.k > 1), 0)::int as redelivered
      from "${schema}".events e
      left join (select event_id, count(*)::int as k from "${schema}".chaos_appends group by event_id) a on a.event_id = e.id
      where e.type = 'chaos.tick'`);
    const stuck = await q<'n'>(`select count(*)::int as n from "${schema}".jobs where state in ('running', 'available', 'retryable')`);
    const discarded = await q<'n'>(`select count(*)::int as n from "${schema}".jobs where state = 'discarded'`);
    // Appends made inline, in relay rounds (no job row): the run covers that path too.
    const inline = await q<'n'>(`select count(*)::int as n from "${schema}".events where 'append' = any (delivered_inline)`);
    // The long transaction's events: each with its transactional effect and a plain one.
    const late = (await c.query(`select count(*)::int as undelivered from "${schema}".events e
      where e.id = any ($1::uuid[])
        and (not exists (select 1 from "${schema}".chaos_counts c where c.event_id = e.id)
             or not exists (select 1 from "${schema}".chaos_appends a where a.event_id = e.id))`, [longCommit?.committed ?? []])).rows[0] as { undelivered: number };
    const ids = (await c.query(`select id::text as id from "${schema}".events`)).rows.map((r) => r.id as string);
    const storedIds = new Set(ids);
    const lostAcknowledged = [...acknowledged].filter((id) => !storedIds.has(id)).length;
    // When each stage of delivery first ran again after the failover, in a statement begun after
    // it (FAILOVER_STAGES): a round's fanned_out_at is its now(), a job's attempted_at its claim's,
    // an append's at its insert's clock_timestamp().
    const since = (expr: string, from: string, where = 'true') =>
      `(select extract(epoch from min(${expr}) - $1::timestamptz) * 1000 from ${from} where ${where} and ${expr} >= $1)`;
    const resumed = (await c.query(`select
      ${since('fanned_out_at', `"${schema}".events`)} as relay,
      ${since('fanned_out_at', `"${leanSchema}".events`)} as lean,
      ${since('finalized_at', `"${schema}".jobs`, `state = 'completed' and attempted_at >= $1`)} as claim,
      ${since('at', `"${schema}".chaos_appends`)} as append`, [failedOverAt])).rows[0] as Record<'relay' | 'lean' | 'claim' | 'append', string | null>;
    const ms = (v: string | null) => (v === null ? null : Math.round(Number(v)));
    return {
      stored: stored.n, ...counts, ...appends, stuck: stuck.n, discarded: discarded.n, deliveredInline: inline.n, lostAcknowledged, lateUndelivered: late.undelivered,
      failoverResumedMs: {
        'relay round': ms(resumed.relay), 'lean relay round': ms(resumed.lean),
        'claim and completion': ms(resumed.claim), 'plain handler\'s write': ms(resumed.append),
      } satisfies Record<FailoverStage, number | null>,
    };
  });
  const lean = await withClient(URL_, async (c) => {
    const q = async <K extends string>(sql: string) => (await c.query(sql)).rows[0] as Record<K, number>;
    const marks = await q<'stored' | 'missing_mark' | 'redelivered' | 'inline'>(`select
      count(*)::int as stored,
      count(*) filter (where m.k is null)::int as missing_mark,
      coalesce(sum(m.k - 1) filter (where m.k > 1), 0)::int as redelivered,
      count(*) filter (where 'mark' = any (e.delivered_inline))::int as inline
      from "${leanSchema}".events e
      left join (select event_id, count(*)::int as k from "${leanSchema}".chaos_marks group by event_id) m on m.event_id = e.id`);
    // Inline deliveries of the events recorded before the restart, and of those recorded after it.
    const sides = restartedAt && backAt
      ? (await c.query(`select count(*) filter (where created_at < $1)::int as before,
           count(*) filter (where created_at >= $2)::int as after
           from "${leanSchema}".events where 'mark' = any (delivered_inline)`, [restartedAt, backAt])).rows[0] as { before: number; after: number }
      : null;
    const jobs = await q<'stuck' | 'discarded'>(`select
      count(*) filter (where state in ('running', 'available', 'retryable'))::int as stuck,
      count(*) filter (where state = 'discarded')::int as discarded
      from "${leanSchema}".jobs`);
    const storedIds = new Set((await c.query(`select id::text as id from "${leanSchema}".events`)).rows.map((r) => r.id as string));
    const lostAcknowledged = [...leans.acknowledged].filter((id) => !storedIds.has(id)).length;
    return { ...marks, ...jobs, lostAcknowledged, inlineBeforeRestart: sides?.before ?? null, inlineAfterRestart: sides?.after ?? null };
  });

  // The webhook's events: each stored one received with a valid signature at least once, and none
  // acknowledged that was not stored.
  const webhooks = await withClient(URL_, async (c) => {
    const stored = (await c.query(`select id::text as id from "${schema}".events where type = 'chaos.hook'`)).rows.map((r) => r.id as string);
    const storedIds = new Set(stored);
    const lostAcknowledged = [...hooks.acknowledged].filter((id) => !storedIds.has(id)).length;
    const undelivered = stored.filter((id) => !received.has(id)).length;
    let redelivered = 0;
    for (const n of received.values()) redelivered += n - 1;
    return { acknowledged: hooks.acknowledged.size, ambiguousCommits: hooks.ambiguous, stored: stored.length, lost: lostAcknowledged + undelivered, redelivered, rejected: receiver.rejected };
  });

  const lost = result.lostAcknowledged + result.missing_counter + result.missing_append;
  const leanLost = lean.lostAcknowledged + lean.missing_mark;
  const summary = {
    mode: short ? 'short' : 'full', schema, kills, postgresRestarted: restartPostgres, acknowledged: acknowledged.size,
    ambiguousCommits: ticks.ambiguous, stored: result.stored, lost, duplicateEffects: result.duplicate_counter,
    redelivered: result.redelivered, deliveredInline: result.deliveredInline, stuckJobs: result.stuck, discardedJobs: result.discarded,
    lean: {
      acknowledged: leans.acknowledged.size, ambiguousCommits: leans.ambiguous, stored: lean.stored, lost: leanLost,
      redelivered: lean.redelivered, deliveredInline: lean.inline,
      inlineShare: lean.stored > 0 ? Math.round((lean.inline / lean.stored) * 100) / 100 : 0,
      inlineBeforeRestart: lean.inlineBeforeRestart, inlineAfterRestart: lean.inlineAfterRestart,
      stuckJobs: lean.stuck, discardedJobs: lean.discarded,
    },
    webhooks,
    longTransaction: { committed: longCommit?.committed.length ?? 0, heldMs: longCommit?.heldMs ?? null, undelivered: result.lateUndelivered },
    failover: { silenced, resumedMs: result.failoverResumedMs },
    workerCrashes: crashes, workersHungAtStop: hungAtStop, producedMs: produceEnded - produceStarted, producedPerSecond, drainMs, totalMs: Date.now() - started,
  };
  console.log(JSON.stringify(summary));
  await producer.stop();
  await leanProducer.stop();
  await hookProducer.stop();
  proxy.close();
  await receiver.close();
  const reasons = failures(summary);
  if (reasons.length === 0) {
    await withClient(URL_, (c) => c.query(`drop schema "${schema}" cascade; drop schema "${leanSchema}" cascade`));
    if (!process.env.CHAOS_WORKER_LOG) rmSync(logDir, { recursive: true, force: true });
  }
  if (reasons.length > 0) {
    console.error(`chaos: FAILED: ${reasons.join('; ')}; schemas kept for inspection: ${schema}, ${leanSchema}; workers' stderr in ${logDir}`);
    process.exit(1);
  }
  console.error('chaos: passed');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
