// Child process for figures 1 and 7: runs one system's worker over a pre-filled queue, counts
// every handler start, waits until the database agrees that every job is finished, and reports
// the elapsed time and the process's peak RSS. A separate process so RSS is the worker's alone.
import { readdirSync, readFileSync } from 'node:fs';
import { closeAdmin, nowMs, sleep } from './lib/env.js';
import { loadSystem } from './systems.js';

const [name, schema, nArg, concArg, timeoutArg] = process.argv.slice(2);
const n = Number(nArg);
const concurrency = Number(concArg);
const timeoutMs = Number(timeoutArg ?? 300_000);

function vmHwmBytes(): number | null {
  // VmHWM is the kernel's own high-water mark of resident memory, so short spikes between our samples count too.
  const m = /VmHWM:\s+(\d+)\s+kB/.exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) * 1024 : null;
}

/**
 * CPU time (µs) of this process's threads other than the main one: V8's optimizing compiler and
 * its collector's helpers, libuv's pool. From each thread's schedstat (nanoseconds on the CPU),
 * not its stat (10 ms ticks, too coarse for a run of well under a second); null where /proc has none.
 */
function otherThreadsCpuUs(): number | null {
  let tasks: string[];
  try {
    tasks = readdirSync('/proc/self/task');
  } catch {
    return null;
  }
  let ns = 0;
  for (const tid of tasks) {
    if (tid === String(process.pid)) continue;
    try {
      ns += Number(readFileSync(`/proc/self/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // A thread that ended between the listing and the read: its time is gone with it.
    }
  }
  return ns / 1000;
}

async function main() {
  const system = await loadSystem(name!);
  const seen = new Uint32Array(n);
  let handled = 0;
  let outOfRange = 0;
  let allHandled!: () => void;
  const handledAll = new Promise<void>((r) => (allHandled = r));

  let rssPeak = process.memoryUsage.rss();
  const sampler = setInterval(() => {
    rssPeak = Math.max(rssPeak, process.memoryUsage.rss());
  }, 20);

  const why = await system.unavailable(); // also loads the system's modules before the baseline
  if (why) throw new Error(`${name} unavailable: ${why}`);
  // Everything the worker needs is imported by now; growth beyond this is the worker's own.
  const rssAtStart = process.memoryUsage.rss();
  const cpuAtStart = process.cpuUsage();
  const threadsAtStart = otherThreadsCpuUs();
  const t0 = nowMs();
  // When the first handler ran, and when the tenth of the jobs had: start-up and warm-up (a new
  // process meets unoptimised code, unprepared statements, unopened connections) against the rate after.
  const warmupJobs = Math.floor(n / 10);
  let tFirst = 0;
  let tWarm = 0;
  const worker = await system.startWorker(schema!, concurrency, (seq) => {
    if (handled === 0) tFirst = nowMs();
    if (handled === warmupJobs) tWarm = nowMs();
    if (!(seq >= 0 && seq < n)) outOfRange++;
    else seen[seq]!++;
    if (++handled === n) allHandled();
  });

  const deadline = t0 + timeoutMs;
  const timeout = sleep(timeoutMs).then(() => 'timeout' as const);
  if ((await Promise.race([handledAll.then(() => 'ok' as const), timeout])) === 'timeout') {
    throw new Error(`${name}: only ${handled} of ${n} jobs handled within ${timeoutMs} ms`);
  }
  const tHandled = nowMs();
  // "Until all complete" means the database says so: batched completions must have landed.
  let left = await system.remaining(schema!);
  while (left > 0) {
    if (nowMs() > deadline) throw new Error(`${name}: all ${n} handled but ${left} jobs still not completed in the database`);
    await sleep(5);
    left = await system.remaining(schema!);
  }
  const tDone = nowMs();
  const cpu = process.cpuUsage(cpuAtStart);
  const threadsAtDone = otherThreadsCpuUs();
  // A short grace period so a duplicate delivery right after the last completion is still counted.
  await sleep(250);
  clearInterval(sampler);
  rssPeak = Math.max(rssPeak, process.memoryUsage.rss());
  const completedInDb = await system.completed(schema!);
  const hwm = vmHwmBytes();
  await worker.stop();
  await closeAdmin();

  let missing = 0;
  let duplicated = 0;
  for (let i = 0; i < n; i++) {
    if (seen[i] === 0) missing++;
    else if (seen[i]! > 1) duplicated++;
  }
  process.send!({
    ok: true,
    elapsedMs: tDone - t0,
    workerCpuUs: cpu.user + cpu.system,
    otherThreadsCpuUs: threadsAtStart !== null && threadsAtDone !== null ? threadsAtDone - threadsAtStart : null,
    handledMs: tHandled - t0,
    firstJobMs: tFirst - t0,
    afterWarmupJobsPerSec: (n - warmupJobs) / ((tDone - tWarm) / 1000),
    handled,
    missing,
    duplicated,
    outOfRange,
    completedInDb,
    rssPeakBytes: rssPeak,
    rssAtStartBytes: rssAtStart,
    vmHwmBytes: hwm,
  });
}

main().then(
  () => process.exit(0),
  (err) => {
    process.send?.({ ok: false, error: String(err?.stack ?? err) });
    process.exit(1);
  },
);
