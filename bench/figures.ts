// One function per figure of issue 6. Each takes a fresh schema, measures one system once and
// returns plain numbers; run.ts does the interleaving, the repetitions and the medians.
import { fork } from 'node:child_process';
import type pg from 'pg';
import { compiledWorkerChild } from './lib/compile.js';
import { serverCpuSeconds } from './lib/server-cpu.js';
import { connectClients, drive, endClients, nowMs, percentile, sleep } from './lib/env.js';
import type { System } from './lib/system.js';
import { createOrderCopy, createOrders, insertOrderCopy, orderTx, orderTxWithCommittedRow } from './physical.js';
import { reaLatencyBus } from './rea.js';

export interface ThroughputResult {
  jobsPerSec: number;
  elapsedMs: number;
  /** Megabytes of 10^6 bytes, the unit of the target. */
  peakRssMB: number;
  /** Peak minus the RSS once every module was loaded, just before the worker started. */
  rssGrowthMB: number;
  /** PostgreSQL server CPU per job while the worker ran (µs), when the server runs on this machine. */
  serverCpuUsPerJob: number | null;
  /** The worker process's own CPU (user + system) per job while it worked (µs). */
  workerCpuUsPerJob: number;
  /** Of that, its threads' other than the main one (V8's compiler and collector helpers), per job (µs); null without /proc. */
  workerThreadsCpuUsPerJob: number | null;
  /** From starting the worker to its first handler call (ms). */
  firstJobMs: number;
  /** The rate from the moment a tenth of the jobs had been handled until all were complete. */
  afterWarmupJobsPerSec: number;
}

/** Figures 1 and 7: N pre-enqueued jobs, one no-op handler, `concurrency`; worker in a child process. */
export async function throughput(system: System, schema: string, n: number, concurrency: number, timeoutMs: number): Promise<ThroughputResult> {
  await system.install(schema);
  await system.prefill(schema, n);
  const pending = await system.remaining(schema);
  if (pending !== n) throw new Error(`${system.name}: prefill left ${pending} jobs, expected ${n}`);
  const cpu0 = serverCpuSeconds();

  const child = fork(compiledWorkerChild(), [system.name, schema, String(n), String(concurrency), String(timeoutMs)], {
    // e.g. REA_BENCH_WORKER_NODE_ARGS='--cpu-prof --cpu-prof-dir=/tmp/prof' to profile the worker.
    execArgv: process.env.REA_BENCH_WORKER_NODE_ARGS?.split(' ').filter(Boolean) ?? [],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const msg: any = await new Promise((resolve, reject) => {
    let got: unknown;
    child.on('message', (m) => (got = m));
    child.on('error', reject);
    child.on('exit', (code) => (got ? resolve(got) : reject(new Error(`${system.name} worker exited with ${code} and no report`))));
  });
  const cpu1 = serverCpuSeconds();
  if (!msg.ok) throw new Error(`${system.name} worker failed:\n${msg.error}`);
  // Every job exactly once, or the figure is meaningless: fail loudly.
  const problems = [];
  if (msg.handled !== n) problems.push(`handled ${msg.handled} times for ${n} jobs`);
  if (msg.missing) problems.push(`${msg.missing} jobs never handled`);
  if (msg.duplicated) problems.push(`${msg.duplicated} jobs handled more than once`);
  if (msg.outOfRange) problems.push(`${msg.outOfRange} unknown payloads`);
  if (msg.completedInDb !== null && msg.completedInDb !== n) problems.push(`database shows ${msg.completedInDb} completed, expected ${n}`);
  if (problems.length) throw new Error(`${system.name} throughput run is wrong: ${problems.join('; ')}`);
  const peak = Math.max(msg.rssPeakBytes, msg.vmHwmBytes ?? 0);
  return { jobsPerSec: n / (msg.elapsedMs / 1000), elapsedMs: msg.elapsedMs, peakRssMB: peak / 1e6, rssGrowthMB: (peak - msg.rssAtStartBytes) / 1e6,
    serverCpuUsPerJob: cpu0 !== null && cpu1 !== null ? ((cpu1 - cpu0) * 1e6) / n : null,
    workerCpuUsPerJob: msg.workerCpuUs / n, workerThreadsCpuUsPerJob: msg.otherThreadsCpuUs === null ? null : msg.otherThreadsCpuUs / n, firstJobMs: msg.firstJobMs, afterWarmupJobsPerSec: msg.afterWarmupJobsPerSec };
}

export interface LatencyResult {
  p50: number;
  p95: number;
  p99: number;
  max: number;
  achievedRate: number;
  /** PostgreSQL's CPU (all its processes) per measured job, from the first measured send until every job was handled; null where /proc has none. */
  serverCpuUsPerJob: number | null;
  /** This process's CPU (producer and worker: user + system) per measured job, over the same span. */
  processCpuUsPerJob: number;
}

/**
 * Figure 2: a steady `rate` of single-job transactions for `n` jobs; latency is the handler start
 * minus the moment the enqueuing COMMIT returned to the producer (both in this process, so one clock).
 * Sends are scheduled on a fixed grid and not serialized, so a slow commit does not slow the rate.
 */
/** Seconds of figure 2's rate sent before the measured events (see latency()). */
export const LATENCY_WARMUP_S = 1;

export async function latency(system: System, schema: string, n: number, rate: number, concurrency: number): Promise<LatencyResult> {
  await system.install(schema);
  // The first second at the same rate is not measured: the figure is latency at a steady rate,
  // and the first events of every system meet code not yet compiled, statements not yet
  // prepared and connections not yet opened (10-25 ms here), a cost paid once per process.
  const warm = Math.round(rate * LATENCY_WARMUP_S);
  const total = warm + n;
  const committedAt = new Float64Array(total).fill(NaN);
  const startedAt = new Float64Array(total).fill(NaN);
  let handled = 0;
  let done!: () => void;
  const allDone = new Promise<void>((r) => (done = r));
  const onJob = (seq: number) => {
    if (Number.isNaN(startedAt[seq]!)) startedAt[seq] = nowMs();
    if (++handled === total) done();
  };

  let send: (seq: number) => Promise<void>;
  let stop: () => Promise<void>;
  let clients: Awaited<ReturnType<typeof connectClients>> = [];
  if (system.name === 'rea') {
    const r = await reaLatencyBus(schema, concurrency, onJob);
    send = (seq) => r.one(seq);
    stop = () => r.stop();
  } else {
    const worker = await system.startWorker(schema, concurrency, onJob);
    const producer = await system.producer(schema);
    clients = await connectClients(8, 'rea-bench-latency');
    const free = [...clients];
    const waiters: ((c: (typeof clients)[number]) => void)[] = [];
    const take = () => (free.length ? Promise.resolve(free.pop()!) : new Promise<(typeof clients)[number]>((r) => waiters.push(r)));
    const give = (c: (typeof clients)[number]) => (waiters.length ? waiters.shift()!(c) : free.push(c));
    send = async (seq) => {
      const c = await take();
      try {
        await producer.one(c, seq);
      } finally {
        give(c);
      }
    };
    stop = async () => {
      await worker.stop();
      await producer.close();
    };
  }
  // Let the worker settle (LISTEN established, first idle poll done) before the clock starts.
  await sleep(500);

  const interval = 1000 / rate;
  const tWarm = nowMs();
  const sends: Promise<void>[] = [];
  // The cost of the rate, taken over the measured jobs alone (as their latency): not the warm-up.
  let serverCpu0: number | null = null;
  let processCpu0: NodeJS.CpuUsage | undefined;
  for (let seq = 0; seq < total; seq++) {
    if (seq === warm) {
      serverCpu0 = serverCpuSeconds();
      processCpu0 = process.cpuUsage();
    }
    const due = tWarm + seq * interval;
    const wait = due - nowMs();
    if (wait > 1) await sleep(wait);
    sends.push(send(seq).then(() => void (committedAt[seq] = nowMs())));
  }
  await Promise.all(sends);
  const tSent = nowMs();
  const t0 = tWarm + warm * interval; // when the first measured event was due
  const timeout = sleep(30_000).then(() => 'timeout' as const);
  const outcome = await Promise.race([allDone.then(() => 'ok' as const), timeout]);
  const serverCpu1 = serverCpuSeconds();
  const processCpu = process.cpuUsage(processCpu0);
  await stop();
  await endClients(clients);
  if (outcome === 'timeout') throw new Error(`${system.name}: latency run handled ${handled} of ${total} within 30 s of the last commit`);

  const lat: number[] = [];
  for (let i = warm; i < total; i++) lat.push(startedAt[i]! - committedAt[i]!);
  if (lat.some(Number.isNaN)) throw new Error(`${system.name}: some latency samples are missing`);
  return {
    p50: percentile(lat, 50),
    p95: percentile(lat, 95),
    p99: percentile(lat, 99),
    max: Math.max(...lat),
    achievedRate: n / ((tSent - t0) / 1000),
    serverCpuUsPerJob: serverCpu0 !== null && serverCpu1 !== null ? ((serverCpu1 - serverCpu0) * 1e6) / n : null,
    processCpuUsPerJob: (processCpu.user + processCpu.system) / n,
  };
}

/** `total` runs of each side, in chunks of a quarter, the sides taking turns so drift in the machine hits them alike; each side's mean rate. */
async function alternated(clients: pg.Client[], total: number, sides: ((c: pg.Client) => Promise<unknown>)[]): Promise<number[]> {
  const chunk = Math.max(400, Math.ceil(total / 4));
  const rounds = Math.ceil(total / chunk);
  const sums = sides.map(() => 0);
  for (let k = 0; k < rounds; k++) {
    for (let j = 0; j < sides.length; j++) sums[j]! += await drive(clients, chunk, async (c) => void (await sides[j]!(c)));
  }
  return sums.map((x) => x / rounds);
}

/**
 * Figure 3: jobs per second enqueued one per transaction from 8 connections, and in batches of
 * 500. The single enqueues alternate in chunks with figure 5's plain transaction (BEGIN, one order
 * row, COMMIT) on the same connections, so "single ÷ plain" compares two rates of one moment,
 * not of two figures minutes apart on a machine whose speed drifts.
 */
export async function enqueue(system: System, schema: string, singles: number, batched: number, connections: number): Promise<{ single: number; plainAlongside: number; batch: number }> {
  await system.install(schema);
  await createOrders(schema);
  const producer = await system.producer(schema);
  const clients = await connectClients(connections, 'rea-bench-enqueue');
  try {
    await drive(clients, Math.min(200, singles / 10), (c, i) => producer.one(c, 1_000_000 + i));
    let seq = 0;
    let order = 0;
    const [single, plainAlongside] = await alternated(clients, singles, [
      (c) => producer.one(c, seq++),
      (c) => orderTx(c, schema, order++),
    ]);
    const batches = Math.ceil(batched / 500);
    const batchRate = await drive(clients, batches, (c, b) =>
      producer.many(c, Array.from({ length: 500 }, (_, k) => 2_000_000 + b * 500 + k)),
    );
    return { single: single!, plainAlongside: plainAlongside!, batch: batchRate * 500 };
  } finally {
    await endClients(clients);
    await producer.close();
  }
}

/**
 * Figure 4 (rea only, though any system can run it): the same business transaction (insert an
 * order) without and with one enqueue in it, alternated in chunks so drift in the machine hits
 * both sides alike. Returns transactions per second for each side, and PostgreSQL's own floor for
 * "one more row in this transaction": a second plain row (into a copy of the orders table) as its
 * own statement, the shape of record() on the caller's client, and sent together with COMMIT in
 * one simple query, the shape of record() in bus.transaction; and, where the producer can write
 * it by hand, the system's own row (rea: the events row) sent with COMMIT, with none of its code.
 */
export async function recordOverhead(system: System, schema: string, total: number, connections: number): Promise<{ alone: number; withRecord: number; extraRow: number; extraRowWithCommit: number; ownRowWithCommit?: number }> {
  await system.install(schema);
  await createOrders(schema);
  await createOrderCopy(schema);
  const producer = await system.producer(schema);
  const clients = await connectClients(connections, 'rea-bench-overhead');
  try {
    let i = 0;
    await drive(clients, 200, (c) => orderTx(c, schema, i++, (cc) => producer.inTx(cc, i)));
    const rowByHand = producer.rowByHand?.bind(producer);
    const sides: ((c: pg.Client) => Promise<unknown>)[] = [
      (c) => orderTx(c, schema, i++),
      (c) => orderTx(c, schema, i++, (cc) => producer.inTx(cc, i)),
      (c) => orderTx(c, schema, i++, (cc) => cc.query(insertOrderCopy(schema), [`o-${i}`, i % 1000])),
      (c) => orderTxWithCommittedRow(c, schema, i++),
    ];
    if (rowByHand) sides.push((c) => orderTxWithCommittedRow(c, schema, i, rowByHand(i++)));
    const [alone, withRecord, extraRow, extraRowWithCommit, ownRowWithCommit] = await alternated(clients, total, sides);
    if (ownRowWithCommit !== undefined) return { alone: alone!, withRecord: withRecord!, extraRow: extraRow!, extraRowWithCommit: extraRowWithCommit!, ownRowWithCommit };
    return { alone: alone!, withRecord: withRecord!, extraRow: extraRow!, extraRowWithCommit: extraRowWithCommit! };
  } finally {
    await endClients(clients);
    await producer.close();
  }
}
