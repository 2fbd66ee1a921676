// The storage-bounds soak of issue 3: steady recording with retention windows shortened to a
// minute, one handler that always fails and one poisoned event. Samples each rea table's size
// over time to show it plateaus, and notes when each alert fired. Not a timed test.
//
// run.ts can call runStorageBench() and append storageMarkdown(result) to its results file;
// standalone: `node --import tsx bench/storage.ts [--quick]` writes bench/RESULTS.storage.md.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { createBus, defineEvents } from '../src/index.js';
import { DATABASE_URL, closeAdmin, dropSchema, ensureDatabase, sleep } from './lib/env.js';

export interface StorageBenchOptions {
  url?: string;
  schema?: string;
  /** How long to record (default 5 min; the shape shows after ~3 windows). */
  durationMs?: number;
  ratePerSecond?: number;
  /** Every retention window (events, jobs, consumes); default 1 min. */
  windowMs?: number;
  sampleEveryMs?: number;
  log?: (line: string) => void;
}

export interface StorageSample {
  atMs: number;
  /** pg_total_relation_size per table, bytes. */
  tables: Record<string, number>;
  /** Live rows per table (exact counts: the soak measures bounds, not the overview's cost). */
  rows: Record<string, number>;
  backlog: number;
  poisoned: number;
  discarded: number;
  completed: number;
  alerts: string[];
}

export interface StorageBenchResult {
  options: Required<Omit<StorageBenchOptions, 'log' | 'url' | 'schema'>>;
  recorded: number;
  samples: StorageSample[];
  /** First and last time each alert was seen (ms since start). */
  alerts: { name: string; firstAtMs: number; lastAtMs: number }[];
  /** Growth of each table over the second and the last third of the run: a plateau keeps the last small. */
  plateau: { table: string; middleThirdBytes: number; lastThirdBytes: number; plateaued: boolean }[];
}

const events = defineEvents({
  'reading.taken': z.object({ sensor: z.string(), value: z.number(), poison: z.boolean().optional() }),
});

export async function runStorageBench(opts: StorageBenchOptions = {}): Promise<StorageBenchResult> {
  const o = {
    durationMs: opts.durationMs ?? 300_000,
    ratePerSecond: opts.ratePerSecond ?? 200,
    windowMs: opts.windowMs ?? 60_000,
    sampleEveryMs: opts.sampleEveryMs ?? 10_000,
  };
  const log = opts.log ?? ((l: string) => console.error(`[storage] ${l}`));
  const url = opts.url ?? DATABASE_URL;
  const schema = opts.schema ?? 'bench_storage';
  if (!opts.url) await ensureDatabase();
  await dropSchema(schema);
  const every = Math.max(1000, Math.floor(o.windowMs / 6));
  const bus = createBus({
    database: { postgres: url, poolSize: 6 },
    schema,
    events,
    logger: silent,
    leader: { ttlMs: 5000, renewMs: 1000 },
    retention: {
      pauseMs: 20,
      events: { olderThanMs: o.windowMs, everyMs: every },
      jobs: { completedMs: o.windowMs, discardedMs: o.windowMs, cancelledMs: o.windowMs, everyMs: every },
      consumes: { olderThanMs: o.windowMs, everyMs: every },
    },
  });
  await bus.migrate();
  // The poison: inserting any job for the marked event fails, so its fan-out fails 5 times.
  await bus.driver.execScript(`
    create function "${schema}".reject_poison() returns trigger language plpgsql as $$
    begin
      if exists (select 1 from "${schema}".events where id = new.event_id and payload ? 'poison') then
        raise exception 'bench: this event is poison';
      end if;
      return new;
    end $$;
    create trigger reject_poison before insert on "${schema}".jobs for each row execute function "${schema}".reject_poison();`);
  bus.on('reading.taken', 'store', async (_e, ctx) => {
    await ctx.tx!.query('select 1');
  }, { transactional: true });
  bus.on('reading.taken', 'always-fails', () => {
    throw new Error('bench: this handler always fails');
  }, { maxAttempts: 2, backoff: () => 200 });
  await bus.start();

  const started = Date.now();
  const samples: StorageSample[] = [];
  const seen = new Map<string, { firstAtMs: number; lastAtMs: number }>();
  let recorded = 0;
  await bus.transaction((tx) => bus.record(tx, 'reading.taken', { sensor: 'p', value: 0, poison: true }));

  const sample = async () => {
    const ov = await bus.overview();
    const atMs = Date.now() - started;
    const rows: Record<string, number> = {};
    for (const t of TRACKED) rows[t] = Number((await bus.driver.query<{ n: string }>(`select count(*) as n from "${schema}".${t}`)).rows[0]!.n);
    const s: StorageSample = {
      atMs, rows, backlog: ov.backlog, poisoned: ov.poisoned, discarded: ov.discarded, completed: ov.jobs.completed,
      tables: Object.fromEntries(ov.tables.map((t) => [t.name, t.totalBytes])), alerts: ov.alerts.map((a) => a.name),
    };
    for (const name of s.alerts) {
      const e = seen.get(name);
      if (e) e.lastAtMs = atMs;
      else {
        seen.set(name, { firstAtMs: atMs, lastAtMs: atMs });
        log(`alert ${name} fired at ${(atMs / 1000).toFixed(0)} s`);
      }
    }
    samples.push(s);
    log(`${(atMs / 1000).toFixed(0).padStart(4)} s  ${Object.entries(s.tables).filter(([n]) => TRACKED.includes(n)).map(([n, b]) => `${n} ${(b / 1024).toFixed(0)} kB (${rows[n]} rows)`).join('  ')}  backlog ${s.backlog} discarded ${s.discarded}`);
  };

  // Steady rate in 10 ticks a second, each one transaction.
  const perTick = Math.max(1, Math.round(o.ratePerSecond / 10));
  let nextSample = 0;
  for (let tick = 0; Date.now() - started < o.durationMs; tick++) {
    const due = started + tick * 100;
    if (due > Date.now()) await sleep(due - Date.now());
    await bus.transaction((tx) => bus.recordMany(tx, Array.from({ length: perTick }, (_, i) => ({
      type: 'reading.taken' as const, payload: { sensor: `s${i % 16}`, value: tick }, subject: `s${i % 16}`,
    }))));
    recorded += perTick;
    if (Date.now() - started >= nextSample) {
      await sample();
      nextSample += o.sampleEveryMs;
    }
  }
  await sample();
  await bus.stop({ timeoutMs: 5000 });
  await dropSchema(schema);
  if (!opts.url) await closeAdmin();

  const third = o.durationMs / 3;
  const at = (ms: number) => samples.reduce((best, s) => (Math.abs(s.atMs - ms) < Math.abs(best.atMs - ms) ? s : best), samples[0]!);
  const plateau = TRACKED.map((table) => {
    const middleThirdBytes = (at(2 * third).tables[table] ?? 0) - (at(third).tables[table] ?? 0);
    const lastThirdBytes = (samples.at(-1)!.tables[table] ?? 0) - (at(2 * third).tables[table] ?? 0);
    // Plateaued: the last third grew less than half as much as the one before, or under 64 kB.
    return { table, middleThirdBytes, lastThirdBytes, plateaued: lastThirdBytes < 64 * 1024 || lastThirdBytes < middleThirdBytes / 2 };
  });
  return { options: o, recorded, samples, alerts: [...seen].map(([name, t]) => ({ name, ...t })), plateau };
}

const TRACKED = ['events', 'jobs', 'consumes'];

const silent = { info() {}, warn() {}, error() {}, debug() {}, child() { return silent; } } as never;

export function storageMarkdown(r: StorageBenchResult): string {
  const kb = (b: number | undefined) => `${((b ?? 0) / 1024).toFixed(0)} kB`;
  const lines = [
    '## Storage bounds soak (issue 3)',
    '',
    `${r.recorded} events at ${r.options.ratePerSecond}/s for ${(r.options.durationMs / 1000).toFixed(0)} s, every retention window ${(r.options.windowMs / 1000).toFixed(0)} s, ` +
      'one handler that always fails (2 attempts), one poisoned event.',
    '',
    'Each cell: total size (rows). Rows plateau after one window; sizes plateau once deleted rows are vacuumed and their space reused (this server runs with autovacuum off, so rea\'s leader vacuums its tables every minute).',
    '',
    `| t (s) | ${TRACKED.join(' | ')} | backlog | completed | discarded | alerts |`,
    `|---|${TRACKED.map(() => '---:').join('|')}|---:|---:|---:|---|`,
    ...r.samples.map((s) => `| ${(s.atMs / 1000).toFixed(0)} | ${TRACKED.map((t) => `${kb(s.tables[t])} (${s.rows[t]})`).join(' | ')} | ${s.backlog} | ${s.completed} | ${s.discarded} | ${s.alerts.join(', ') || '-'} |`),
    '',
    '| table | growth, middle third | growth, last third | plateau |',
    '|---|---:|---:|---|',
    ...r.plateau.map((p) => `| ${p.table} | ${kb(p.middleThirdBytes)} | ${kb(p.lastThirdBytes)} | ${p.plateaued ? 'yes' : 'no'} |`),
    '',
    'Alerts: ' + (r.alerts.length ? r.alerts.map((a) => `${a.name} first at ${(a.firstAtMs / 1000).toFixed(0)} s, last seen ${(a.lastAtMs / 1000).toFixed(0)} s`).join('; ') : 'none'),
    '',
  ];
  return lines.join('\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const quick = process.argv.includes('--quick');
  const result = await runStorageBench(quick ? { durationMs: 90_000, windowMs: 20_000, sampleEveryMs: 5_000 } : {});
  const md = storageMarkdown(result);
  writeFileSync(new URL('./RESULTS.storage.md', import.meta.url), `# rea storage bounds\n\n${md}`);
  console.log(md);
}
