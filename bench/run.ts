// `npm run bench [-- --quick] [-- --only=<figure>[,<figure>]] [-- --reps=N]`
// Runs the figures of issue 6 against rea, graphile-worker and pg-boss on one PostgreSQL,
// interleaved (rea, graphile, pg-boss, rea, …) so drift in the machine spreads over all systems,
// prints one JSON line per figure and system, and writes the results as Markdown.
import { writeFileSync } from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { claimCost } from './claim.js';
import { profileStatements } from './profile.js';
import { enqueue, latency, LATENCY_WARMUP_S, recordOverhead, throughput } from './figures.js';
import { compiledWorkerChild } from './lib/compile.js';
import { runStorageBench, storageMarkdown } from './storage.js';
import { reaBatchSize, reaInlineMs, reaTxOverhead } from './rea.js';
import { closeAdmin, dropSchema, ensureDatabase, median } from './lib/env.js';
import { PROTOTYPE_NAMES, type System } from './lib/system.js';
import { physicalRates } from './physical.js';
import { environment, sourceRevision, jsonLine, markdown, seriesMedian, type Series, type Target } from './report.js';
import { loadSystems } from './systems.js';

const isPrototype = (name: string) => (PROTOTYPE_NAMES as readonly string[]).includes(name);

// 'storage' is issue 3's soak: table sizes over time under retention (rea only, run last).
const FIGURES = ['throughput', 'latency', 'enqueue', 'overhead', 'physical', 'claim', 'storage'] as const;
type Figure = (typeof FIGURES)[number];
// Figure 7 (memory) is sampled during figure 1, so asking for it runs figure 1.
const ALIASES: Record<string, Figure> = { memory: 'throughput', rss: 'throughput', '1': 'throughput', '7': 'throughput', '2': 'latency', '3': 'enqueue', '4': 'overhead', '5': 'physical', '6': 'claim' };

const args = process.argv.slice(2);
const flag = (name: string) => args.find((a) => a === `--${name}` || a.startsWith(`--${name}=`));
const value = (name: string) => flag(name)?.split('=').slice(1).join('=');
for (const a of args) {
  if (!/^--(quick|only|reps|out|explain|inline-ms|batch-size|prototypes)(=|$)/.test(a)) {
    console.error(`unknown argument ${a}\nusage: npm run bench -- [--quick] [--explain] [--only=${FIGURES.join('|')}|memory[,…]] [--reps=N] [--out=path] [--inline-ms=N] [--batch-size=N] [--prototypes]`);
    process.exit(2);
  }
}
// rea's relay.inlineMs (50 unless given; 0 measures rea's defaults, without inline delivery).
// Through the environment, so the figure-1 worker children see it too.
if (flag('inline-ms')) {
  const ms = value('inline-ms') ?? '';
  if (!/^\d+$/.test(ms)) {
    console.error(`--inline-ms takes a whole number of milliseconds (0: no inline delivery), not '${ms}'`);
    process.exit(2);
  }
  process.env.REA_BENCH_INLINE_MS = ms;
}
// rea's relay.batchSize in figures 1, 2 and 7 (rea's default, 200, unless given).
if (flag('batch-size')) {
  const n = value('batch-size') ?? '';
  if (!/^[1-9]\d*$/.test(n)) {
    console.error(`--batch-size takes a whole number of events per relay round, not '${n}'`);
    process.exit(2);
  }
  process.env.REA_BENCH_BATCH_SIZE = n;
}
// Figure 1 only: four minimal workers beside the systems (experiments/lean-rounds.ts), to see
// what the shape of a round costs. They are not rea, and no target reads them.
// Before loadSystems compiles rea: the build it makes is what the run measures.
const SOURCE = sourceRevision();
const SYSTEMS = await loadSystems({ prototypes: !!flag('prototypes') });
const quick = !!flag('quick');
const explain = !!flag('explain'); // print EXPLAIN (ANALYZE, BUFFERS, WAL) of rea's per-job statements (figures 1 and 6)
const only: Figure[] | null = value('only')
  ? value('only')!.split(',').map((f) => {
      const fig = (ALIASES[f] ?? f) as Figure;
      if (!FIGURES.includes(fig)) {
        console.error(`unknown figure ${f}; one of ${FIGURES.join(', ')}, memory`);
        process.exit(2);
      }
      return fig;
    })
  : null;
const figures = FIGURES.filter((f) => !only || only.includes(f));
const reps = Number(value('reps') ?? (quick ? 1 : 3));

const CONCURRENCY = 8;
const CONNECTIONS = 8;
const SIZE = quick
  ? { throughput: 2_000, latencyN: 400, rate: 200, singles: 2_000, batched: 10_000, physical: 4_000, overhead: 2_000, claimSmall: 10_000, claimLarge: 500_000, claimRounds: 10, timeoutMs: 60_000 }
  : { throughput: 20_000, latencyN: 2_000, rate: 200, singles: 20_000, batched: 50_000, physical: 20_000, overhead: 20_000, claimSmall: 10_000, claimLarge: 5_000_000, claimRounds: 20, timeoutMs: 300_000 };

const log = (...m: unknown[]) => console.error('[bench]', ...m);

// results[figureKey][system] -> runs
const runs = new Map<string, Map<string, number[]>>();
const skipped = new Map<string, string>(); // system -> reason
const failures: string[] = [];
const failedCells = new Map<string, string>(); // `${figure}|${system}` -> error
function put(figure: string, system: string, v: number) {
  if (!runs.has(figure)) runs.set(figure, new Map());
  const m = runs.get(figure)!;
  if (!m.has(system)) m.set(system, []);
  m.get(system)!.push(v);
}

const short: Record<string, string> = { 'rea': 'rea', 'graphile-worker': 'gw', 'pg-boss': 'pgb', 'postgres': 'pg', 'proto-rowclaim-tx': 'ptx', 'proto-rowclaim': 'prow', 'proto-cursor': 'pcur', 'proto-lanes': 'plan' };

async function cell(figure: Figure, system: string, rep: number, fn: (schema: string) => Promise<void>) {
  const schema = `bench_${short[system]}_${figure}_r${rep}`;
  await dropSchema(schema);
  const t0 = Date.now();
  try {
    await fn(schema);
    log(`${figure} ${system} rep ${rep}: ok in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  } catch (err) {
    const msg = `${figure} / ${system} / rep ${rep}: ${(err as Error).stack ?? err}`;
    failures.push(msg);
    failedCells.set(`${figure}|${system}`, (err as Error).message ?? String(err));
    console.error(`\n[bench] FAILED ${msg}\n`);
  } finally {
    // Drop at once: 5 M history rows and 20 k-job queues should not pile up across repetitions.
    await dropSchema(schema).catch(() => undefined);
  }
}

async function runSystemFigure(figure: Figure, sys: System, rep: number) {
  await cell(figure, sys.name, rep, async (schema) => {
    switch (figure) {
      case 'throughput': {
        const r = await throughput(sys, schema, SIZE.throughput, CONCURRENCY, SIZE.timeoutMs);
        put('throughput', sys.name, r.jobsPerSec);
        put('first_job', sys.name, r.firstJobMs);
        put('throughput_after_warmup', sys.name, r.afterWarmupJobsPerSec);
        put('peak_rss', sys.name, r.peakRssMB);
        put('rss_growth_while_working', sys.name, r.rssGrowthMB);
        if (r.serverCpuUsPerJob !== null) put('server_cpu_per_job', sys.name, r.serverCpuUsPerJob);
        put('worker_cpu_per_job', sys.name, r.workerCpuUsPerJob);
        if (r.workerThreadsCpuUsPerJob !== null) put('worker_threads_cpu_per_job', sys.name, r.workerThreadsCpuUsPerJob);
        if (sys.name === 'rea') {
          // Where that CPU goes: rea's three per-job statements, each alone (bench/profile.ts).
          for (const p of await profileStatements(`${schema}_profile`, SIZE.throughput, explain)) {
            const key = `profile_${p.statement.replaceAll('-', '')}`;
            put(`${key}_wall`, sys.name, p.wallUsPerRow);
            if (p.serverCpuUsPerRow !== null) put(`${key}_cpu`, sys.name, p.serverCpuUsPerRow);
          }
        }
        break;
      }
      case 'latency': {
        const r = await latency(sys, schema, SIZE.latencyN, SIZE.rate, CONCURRENCY);
        put('latency_p50', sys.name, r.p50);
        put('latency_p95', sys.name, r.p95);
        put('latency_p99', sys.name, r.p99);
        put('latency_max', sys.name, r.max);
        put('latency_offered_rate', sys.name, r.achievedRate);
        if (r.serverCpuUsPerJob !== null) put('latency_server_cpu_per_job', sys.name, r.serverCpuUsPerJob);
        put('latency_process_cpu_per_job', sys.name, r.processCpuUsPerJob);
        break;
      }
      case 'enqueue': {
        const r = await enqueue(sys, schema, SIZE.singles, SIZE.batched, CONNECTIONS);
        put('enqueue_single', sys.name, r.single);
        put('enqueue_plain_alongside', sys.name, r.plainAlongside);
        put('enqueue_batch500', sys.name, r.batch);
        break;
      }
      case 'overhead': {
        const r = await recordOverhead(sys, schema, SIZE.overhead, CONNECTIONS);
        put('overhead_order_alone', sys.name, r.alone);
        put('overhead_order_with_record', sys.name, r.withRecord);
        put('overhead_order_plus_row', sys.name, r.extraRow);
        put('overhead_order_plus_row_with_commit', sys.name, r.extraRowWithCommit);
        if (r.ownRowWithCommit !== undefined) put('overhead_order_plus_own_row_with_commit', sys.name, r.ownRowWithCommit);
        if (sys.name === 'rea') {
          const t = await reaTxOverhead(`${schema}_tx`, SIZE.overhead, CONNECTIONS);
          put('overhead_bustx_alone', sys.name, t.alone);
          put('overhead_bustx_with_record', sys.name, t.withRecord);
        }
        break;
      }
      case 'claim': {
        const r = await claimCost(schema, SIZE.claimSmall, SIZE.claimLarge, SIZE.claimRounds, explain);
        put('claim_small_history', sys.name, r.smallMs);
        put('claim_large_history', sys.name, r.largeMs);
        break;
      }
      case 'physical':
        break;
    }
  });
}

/** Which systems take part in which figure: 4 and 6 are about rea's own costs. */
function systemsFor(figure: Figure): System[] {
  if (figure === 'overhead' || figure === 'claim') return SYSTEMS.filter((s) => s.name === 'rea');
  if (figure === 'physical') return [];
  if (figure !== 'throughput') return SYSTEMS.filter((s) => !isPrototype(s.name));
  return SYSTEMS;
}

async function main() {
  const started = new Date();
  await ensureDatabase();
  log('compiling rea and the figure-1 worker child (tsc → bench/.build)');
  compiledWorkerChild();
  for (const s of SYSTEMS) {
    const why = await s.unavailable();
    if (why) {
      skipped.set(s.name, why);
      log(`${s.name} skipped: ${why}`);
    }
  }

  log(`${quick ? 'QUICK' : 'full'} run: figures ${figures.join(', ')}; ${reps} repetition(s)`);
  for (let rep = 1; rep <= reps; rep++) {
    for (const figure of figures) {
      if (figure === 'storage') continue; // once, after the repetitions
      if (figure === 'physical') {
        await cell('physical', 'postgres', rep, async (schema) => {
          const r = await physicalRates(schema, SIZE.physical, CONNECTIONS);
          put('physical_plain', 'postgres', r.plain);
          put('physical_notify', 'postgres', r.notify);
        });
        continue;
      }
      for (const sys of systemsFor(figure)) {
        if (skipped.has(sys.name)) continue;
        await runSystemFigure(figure, sys, rep);
      }
    }
  }

  let storage: string | undefined;
  if (figures.includes('storage')) {
    // A soak, not a ratio: one run, shortened in quick mode (windows of 6 s instead of 1 min, four of them).
    const r = await runStorageBench(quick ? { durationMs: 24_000, windowMs: 6_000, sampleEveryMs: 3_000 } : {});
    console.log(JSON.stringify({ figure: 'storage', system: 'rea', samples: r.samples.length, recorded: r.recorded }));
    storage = storageMarkdown(r);
  }

  const series = collect();
  for (const s of series) console.log(jsonLine(s));

  const env = await environment(SOURCE);
  const targets = targetsOf(series);
  const partial = only !== null;
  const out = value('out') ?? fileURLToPath(new URL(quick || partial ? './RESULTS.quick.md' : './RESULTS.md', import.meta.url));
  const npmArgs = args.length ? ` -- ${args.join(' ')}` : '';
  const command = process.env.npm_lifecycle_event === 'bench' ? `npm run bench${npmArgs}` : `node --import tsx bench/run.ts ${args.join(' ')}`.trim();
  writeFileSync(out, markdown({
    title: quick ? 'rea benchmark results (QUICK MODE)' : partial ? 'rea benchmark results (partial)' : 'rea benchmark results',
    quick, partial, command, date: started.toISOString(), reps, env, series, targets, failures,
    sizes: {
      'figure 1 jobs': SIZE.throughput.toLocaleString('en-US'),
      'concurrency': String(CONCURRENCY),
      'figure 2': `${SIZE.latencyN.toLocaleString('en-US')} jobs at ${SIZE.rate}/s, after ${Math.round(SIZE.rate * LATENCY_WARMUP_S)} not measured`,
      'figure 3': `${SIZE.singles.toLocaleString('en-US')} single-job transactions; ${SIZE.batched.toLocaleString('en-US')} jobs in batches of 500; ${CONNECTIONS} connections`,
      'figure 4': `${SIZE.overhead.toLocaleString('en-US')} transactions per side, ${CONNECTIONS} connections`,
      'figure 5': `${SIZE.physical.toLocaleString('en-US')} transactions per variant, ${CONNECTIONS} connections`,
      'figure 6': `${SIZE.claimSmall.toLocaleString('en-US')} vs ${SIZE.claimLarge.toLocaleString('en-US')} fanned rows; median of ${SIZE.claimRounds} rounds of 200${quick ? ' (quick mode uses 500 k, not 5 M)' : ''}`,
    },
    notes: NOTES,
  }) + (storage ? `\n${storage}\n` : ''));
  log(`wrote ${out}`);
  await closeAdmin();
  if (failures.length) {
    console.error(`[bench] ${failures.length} run(s) FAILED; see above`);
    process.exit(1);
  }
}

const UNITS: Record<string, string> = {
  throughput: 'jobs/s', first_job: 'ms', throughput_after_warmup: 'jobs/s', server_cpu_per_job: 'µs', worker_cpu_per_job: 'µs', worker_threads_cpu_per_job: 'µs',
  profile_fanout_wall: 'µs/row', profile_fanout_cpu: 'µs/row', profile_claim_wall: 'µs/row', profile_claim_cpu: 'µs/row', profile_complete_wall: 'µs/row', profile_complete_cpu: 'µs/row', profile_inlinefanout_wall: 'µs/row', profile_inlinefanout_cpu: 'µs/row', profile_leaninlinefanout_wall: 'µs/row', profile_leaninlinefanout_cpu: 'µs/row',
  peak_rss: 'MB', rss_growth_while_working: 'MB', latency_p50: 'ms', latency_p95: 'ms', latency_p99: 'ms', latency_max: 'ms',
  latency_offered_rate: 'jobs/s', latency_server_cpu_per_job: 'µs', latency_process_cpu_per_job: 'µs', enqueue_single: 'jobs/s', enqueue_plain_alongside: 'tx/s', enqueue_batch500: 'jobs/s',
  overhead_order_alone: 'tx/s', overhead_order_with_record: 'tx/s', physical_plain: 'tx/s', physical_notify: 'tx/s',
  overhead_bustx_alone: 'tx/s', overhead_bustx_with_record: 'tx/s', overhead_order_plus_row: 'tx/s', overhead_order_plus_row_with_commit: 'tx/s', overhead_order_plus_own_row_with_commit: 'tx/s',
  claim_small_history: 'ms', claim_large_history: 'ms',
};
const FIGURE_OF: Record<string, Figure> = {
  throughput: 'throughput', first_job: 'throughput', throughput_after_warmup: 'throughput', server_cpu_per_job: 'throughput', worker_cpu_per_job: 'throughput', worker_threads_cpu_per_job: 'throughput',
  profile_fanout_wall: 'throughput', profile_fanout_cpu: 'throughput', profile_claim_wall: 'throughput', profile_claim_cpu: 'throughput', profile_complete_wall: 'throughput', profile_complete_cpu: 'throughput', profile_inlinefanout_wall: 'throughput', profile_inlinefanout_cpu: 'throughput', profile_leaninlinefanout_wall: 'throughput', profile_leaninlinefanout_cpu: 'throughput',
  peak_rss: 'throughput', rss_growth_while_working: 'throughput', latency_p50: 'latency', latency_p95: 'latency', latency_p99: 'latency',
  latency_max: 'latency', latency_offered_rate: 'latency', latency_server_cpu_per_job: 'latency', latency_process_cpu_per_job: 'latency', enqueue_single: 'enqueue', enqueue_plain_alongside: 'enqueue', enqueue_batch500: 'enqueue',
  overhead_order_alone: 'overhead', overhead_order_with_record: 'overhead', physical_plain: 'physical', physical_notify: 'physical',
  overhead_bustx_alone: 'overhead', overhead_bustx_with_record: 'overhead', overhead_order_plus_row: 'overhead', overhead_order_plus_row_with_commit: 'overhead', overhead_order_plus_own_row_with_commit: 'overhead',
  claim_small_history: 'claim', claim_large_history: 'claim',
};

function collect(): Series[] {
  const out: Series[] = [];
  const plain = runs.get('physical_plain')?.get('postgres');
  const plainMedian = plain ? median(plain) : undefined;
  for (const key of Object.keys(UNITS)) {
    const fig = FIGURE_OF[key]!;
    if (!figures.includes(fig)) continue;
    const names = fig === 'physical' ? ['postgres'] : key.startsWith('profile_') ? ['rea'] : systemsFor(fig).map((s) => s.name);
    for (const name of names) {
      const r = runs.get(key)?.get(name);
      const s: Series = { figure: key, system: name, unit: UNITS[key]!, runs: r ?? [] };
      if (!r) {
        if (skipped.has(name)) s.skipped = skipped.get(name)!;
        else s.failed = failedCells.get(`${fig}|${name}`) ?? 'no result';
      }
      // Every rea rate is also shown against what PostgreSQL commits with no queue at all.
      if (r && name === 'rea' && plainMedian && UNITS[key] === 'jobs/s' && key !== 'latency_offered_rate') s.fractionOfPlain = median(r) / plainMedian;
      out.push(s);
    }
  }
  // Ratios of medians, as the issue defines them.
  const ratio = (figure: string, num: string, den: string, unit: string, note: string) => {
    const a = runs.get(num)?.get('rea');
    const b = runs.get(den)?.get('rea');
    if (a && b) out.push({ figure, system: 'rea', unit, runs: a.map((x, i) => x / b[i]!), median: median(a) / median(b), note });
  };
  if (figures.includes('overhead')) {
    ratio('record_overhead', 'overhead_order_alone', 'overhead_order_with_record', 'ratio', "the caller's own pg client: tx/s alone ÷ tx/s with record");
    ratio('record_overhead_bustx', 'overhead_bustx_alone', 'overhead_bustx_with_record', 'ratio', 'both sides in bus.transaction (the event travels with COMMIT): tx/s alone ÷ tx/s with record');
    ratio('floor_extra_row', 'overhead_order_alone', 'overhead_order_plus_row', 'ratio', "PostgreSQL's floor for record() on the caller's client: one more plain row as its own statement, no rea");
    ratio('floor_extra_row_with_commit', 'overhead_order_alone', 'overhead_order_plus_row_with_commit', 'ratio', "PostgreSQL's floor for bus.transaction: one more plain row sent with COMMIT, no rea");
    ratio('floor_event_row_with_commit', 'overhead_order_alone', 'overhead_order_plus_own_row_with_commit', 'ratio', "rea's own events row written by hand and sent with COMMIT, no rea code: what the row itself costs PostgreSQL");
  }
  if (figures.includes('enqueue')) ratio('record_single_vs_plain', 'enqueue_single', 'enqueue_plain_alongside', 'ratio', "single-event transactions ÷ figure 5's plain transactions, alternated with them in chunks");
  if (figures.includes('claim')) ratio('claim_ratio', 'claim_large_history', 'claim_small_history', 'ratio', 'claim ms with large history ÷ with 10 k');
  return out;
}

/**
 * What the figure-1 target leaves to spend: the database server and the worker share this
 * machine's CPUs, so 2× the faster peer's rate allows at most CPUs ÷ that rate of CPU per job,
 * both processes together. Set against what each system used, server + worker.
 */
function cpuBudget(get: (figure: string, system: string) => number | undefined, best: number): string {
  const cpus = os.availableParallelism();
  const budget = (cpus * 1e6) / (2 * best);
  const used = (system: string) => {
    const server = get('server_cpu_per_job', system);
    const worker = get('worker_cpu_per_job', system);
    return server !== undefined && worker !== undefined ? { server, worker } : undefined;
  };
  const fastest = ['graphile-worker', 'pg-boss'].find((name) => get('throughput', name) === best)!;
  const rea = used('rea');
  const peer = used(fastest);
  if (!rea || !peer) return '';
  const us = (x: number) => x.toFixed(0);
  return `; CPU budget at 2× on ${cpus} CPUs: ${us(budget)} µs per job, server and worker together;`
    + ` used: rea ${us(rea.server + rea.worker)} µs (server ${us(rea.server)}, worker ${us(rea.worker)}),`
    + ` ${fastest} ${us(peer.server + peer.worker)} µs (server ${us(peer.server)}, worker ${us(peer.worker)})`;
}

function targetsOf(series: Series[]): Target[] {
  const get = (figure: string, system: string) => {
    const s = series.find((x) => x.figure === figure && x.system === system && !x.skipped && !x.failed && x.runs.length);
    return s ? seriesMedian(s) : undefined;
  };
  const t: Target[] = [];
  const rea1 = get('throughput', 'rea');
  const peers1 = [get('throughput', 'graphile-worker'), get('throughput', 'pg-boss')].filter((x): x is number => x !== undefined);
  const best = peers1.length ? Math.max(...peers1) : undefined;
  t.push({ figure: '1 throughput', text: '≥ 2× the faster peer', met: rea1 !== undefined && best !== undefined ? rea1 >= 2 * best : undefined,
    value: rea1 !== undefined && best !== undefined ? `${Math.round(rea1)} vs ${Math.round(best)} jobs/s (${(rea1 / best).toFixed(2)}×)${cpuBudget(get, best)}` : best !== undefined ? `faster peer ${Math.round(best)} jobs/s; rea not measured` : '—' });
  const p99 = get('latency_p99', 'rea');
  t.push({ figure: '2 latency', text: 'p99 ≤ 10 ms', met: p99 !== undefined ? p99 <= 10 : undefined, value: p99 !== undefined ? `${p99.toFixed(2)} ms` : '—' });
  const single = get('enqueue_single', 'rea');
  const plain = get('physical_plain', 'postgres');
  // Judged on the plain transaction measured alongside (same moment, same connections); the
  // fraction of figure 5's own median, minutes away in the run, is shown next to it.
  const alongside = get('record_single_vs_plain', 'rea');
  const vsFigure5 = single !== undefined && plain !== undefined ? `; against figure 5's median (${Math.round(plain)} tx/s): ${(single / plain).toFixed(2)}` : '';
  t.push({ figure: '3 record single', text: '≥ 0.9 × plain rate (figure 5)', met: alongside !== undefined ? alongside >= 0.9 : undefined,
    value: alongside !== undefined ? `${Math.round(single!)} tx/s, ${alongside.toFixed(3)} × the plain transaction alongside (${Math.round(get('enqueue_plain_alongside', 'rea')!)} tx/s)${vsFigure5}` : plain !== undefined ? `plain ${Math.round(plain)} tx/s; rea not measured` : '—' });
  const floorOf = (f: number | undefined) => (f !== undefined ? `; PostgreSQL's own floor for one more row of this shape: ${f.toFixed(3)}` : '');
  const ov = get('record_overhead', 'rea');
  t.push({ figure: "4 record overhead (caller's pg client)", text: '≤ 1.10', met: ov !== undefined ? ov <= 1.1 : undefined, value: ov !== undefined ? `${ov.toFixed(3)}${floorOf(get('floor_extra_row', 'rea'))}` : '—' });
  const ovTx = get('record_overhead_bustx', 'rea');
  const eventRow = get('floor_event_row_with_commit', 'rea');
  const eventRowText = eventRow !== undefined ? `; rea's own events row by hand, with COMMIT: ${eventRow.toFixed(3)}` : '';
  t.push({ figure: '4 record overhead (bus.transaction)', text: '≤ 1.10', met: ovTx !== undefined ? ovTx <= 1.1 : undefined, value: ovTx !== undefined ? `${ovTx.toFixed(3)}${floorOf(get('floor_extra_row_with_commit', 'rea'))}${eventRowText}` : '—' });
  const cr = get('claim_ratio', 'rea');
  t.push({ figure: '6 claim vs history', text: '≤ 1.2', met: cr !== undefined ? cr <= 1.2 : undefined, value: cr !== undefined ? `${cr.toFixed(3)}${quick ? ' (quick: 500 k rows, not 5 M)' : ''}` : '—' });
  const rss = get('peak_rss', 'rea');
  t.push({ figure: '7 memory', text: 'worker peak RSS ≤ 150 MB', met: rss !== undefined ? rss <= 150 : undefined,
    value: rss !== undefined ? `${rss.toFixed(1)} MB` : '—' });
  return t;
}

const NOTES = [
  'Every system runs on a fresh schema of the same database for every figure and repetition; the schema is dropped right after.',
  'rea runs as compiled JavaScript in every figure, as in production: tsc compiles src/ and bench/ into bench/.build/ at the start of the run, the harness (itself under tsx) imports that build, and the figure-1 children run it under plain node. Under the tsx loader rea\'s own files would be transformed in memory (esbuild wraps each named function in a __name call), and the peers\' published JavaScript would not.',
  'Figure 1: jobs are enqueued with each system\'s bulk API before the worker starts (rea: recordMany of 500, unfanned, so the relay\'s fan-out is inside the measurement). The worker runs in a child process; the clock runs from just before the worker is started until every handler has run and the database shows no unfinished job (graphile: no row left in _private_jobs; pg-boss: every job `completed`; rea: no unfanned event and no job available/running/retryable). The run fails unless every job ran exactly once (a per-seq counter, checked again 250 ms after the end) and, where the system keeps them, the database shows exactly N completed (rea: completed job rows plus events naming the handler in delivered_inline). No system\'s tables are analyzed between the prefill and the run (and autovacuum is off on this machine), so every system is planned on PostgreSQL\'s defaults; a production table has statistics. Tried once with an `analyze` after the prefill (2026-12-07, docs/fan-out-cursor.md): graphile-worker the same at 20 000 jobs, pg-boss ~1.5× faster.',
  'Figure 1, start-up against speed: `first_job` is the time from starting the worker to its first handler call; `throughput_after_warmup` the rate from the moment a tenth of the jobs had been handled until all were complete, leaving out start-up and warm-up (a new process meets unoptimised code, unprepared statements and unopened connections). Both are shown to explain figure 1, which is judged as the issue defines it.',
  'Figure 1, where the time goes: `server_cpu_per_job` is the PostgreSQL server\'s CPU (all its processes, from /proc) per job while the worker ran; it varies far less than the rates with the machine\'s load. `worker_cpu_per_job` is the worker process\'s own CPU (user + system, process.cpuUsage) per job, and `worker_threads_cpu_per_job` the part of it spent on threads other than the main one (each thread\'s schedstat): in a run of well under a second, mostly V8 compiling the worker\'s code on its background threads (with `--no-concurrent-recompilation` it moves to the main thread), which share the two cores with PostgreSQL. `profile_*` runs rea\'s statements alone over the same 20 000 events in rounds of 200 (bench/profile.ts): the three every job passes through by default (the relay\'s fan-out, the worker\'s claim, the batched completion) and `profile_inlinefanout`, the one statement (in its own transaction) an inline round runs instead of all three, and `profile_leaninlinefanout`, its lean form, which figure 1\'s rounds run (every event routes only to this process\'s inline handler: the claim, one update, routing once per event type); wall and server CPU per row. `npm run bench -- --only=throughput --explain` prints EXPLAIN (ANALYZE, BUFFERS, WAL) of one round of each (and `--only=claim --explain` of one figure-6 round on each side).',
  `rea: worker concurrency 8, relay.inlineMs ${reaInlineMs()}${reaInlineMs() > 0 ? ' (inline delivery, as the README advises for throughput; off by default)' : ' (no inline delivery: rea\'s default)'}${reaBatchSize() === undefined ? '' : `, relay.batchSize ${reaBatchSize()} (200 by default)`}, other options at their defaults, in figures 1, 2 and 7. graphile-worker: concurrency 8, maxPoolSize 10, localQueue.size 500, completeJobBatchDelay 0, failJobBatchDelay 0, useNodeTime, as https://worker.graphile.org/docs/performance advises. pg-boss: work() with batchSize 50, localConcurrency 8, burstWhenBatchFull, pollingIntervalSeconds 0.5 (its minimum), useListenNotify with a notify queue.`,
  'Figure 7: peak RSS of the figure-1 worker process: max of process.memoryUsage.rss() sampled every 20 ms and the kernel\'s VmHWM. Each child loads only its own system, under plain node. `rss_growth_while_working` is peak minus the RSS just before the worker started.',
  'Figure 2: producer and worker in one process (one clock). A job is sent every 5 ms on a fixed grid, each in its own transaction on one of 8 connections (rea: bus.transaction + record); latency = handler start − the moment COMMIT returned. The first second at that rate (200 jobs) warms every system up and is not measured: the first events of a process meet uncompiled code, unprepared statements and unopened connections. The peers use the same configuration as figure 1. What the rate costs, over the measured jobs (from the first measured send until every job was handled): `latency_server_cpu_per_job`, PostgreSQL\'s CPU (all its processes, from /proc) per job, and `latency_process_cpu_per_job`, this one process\'s CPU (user + system) per job, the producer\'s transactions and the worker together, with the idle work of 5 ms between jobs (polls, timers, maintenance) included; each job is recorded in its own transaction and, at this rate, most are fetched (rea: fanned out) on their own, so these are far above figure 1\'s per-job costs, where batches of up to 200 share them.',
  'Figure 3: single = BEGIN, enqueue one job, COMMIT, back to back on 8 connections (graphile: add_job SQL; pg-boss: send() on the caller\'s client; rea: record() on the caller\'s client), alternated in chunks with figure 5\'s plain transaction on the same connections (`enqueue_plain_alongside`); target 3 is judged on single ÷ that plain rate (`record_single_vs_plain`), measured at the same moment. Batched = one transaction per 500 jobs (graphile add_jobs, pg-boss insert, rea recordMany), 8 connections.',
  'Figure 4: BEGIN, insert an order row, COMMIT vs the same with record() before COMMIT, 8 connections, alternated in chunks; ratio = tx/s alone ÷ tx/s with record. Alternated with them, two floors with no rea at all: the same transaction plus one more plain row (into a copy of the orders table) as its own statement (the shape of record() on the caller\'s client, one more round trip), and the same row sent with COMMIT in one simple query (the shape of bus.transaction); and, for rea, the very row record() writes into its events table (same columns and values: a uuidv7 id, the type, the JSON payload, its two indexes) written by hand and sent with COMMIT (`floor_event_row_with_commit`), which is what rea\'s row costs PostgreSQL with no rea code at all. A ratio near its floor means rea adds little beyond what one more row costs PostgreSQL on this machine.',
  'Figure 5: BEGIN, insert one row into a plain orders table, COMMIT, 8 connections; and the same with `select pg_notify(\'x\', \'\')` in each transaction. rea rates are also shown as a fraction of the plain rate.',
  'Figure 6: two fresh schemas get their fanned history rows (insert … select generate_series, then vacuum analyze and a checkpoint); then, alternating between the two (small, large, large, small, …), 200 unfanned events are inserted and one relay fan-out round (claim, insert jobs, mark fanned) is timed; median ms of each side; ratio large ÷ small.',
];

main().catch(async (err) => {
  console.error('[bench] fatal', err);
  await closeAdmin().catch(() => undefined);
  process.exit(1);
});
