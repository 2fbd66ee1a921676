// Turns the collected runs into the JSON lines on stdout and the Markdown of bench/RESULTS.md.
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { execSync } from 'node:child_process';
import { adminPool, median, round } from './lib/env.js';

export interface Series {
  figure: string;
  system: string;
  unit: string;
  runs: number[];
  /** How a median is formed for ratios: from the medians of two other series, not per run. */
  median?: number;
  fractionOfPlain?: number;
  skipped?: string;
  failed?: string;
  note?: string;
}

export function seriesMedian(s: Series): number {
  return s.median ?? median(s.runs);
}

export function jsonLine(s: Series): string {
  const o: Record<string, unknown> = { figure: s.figure, system: s.system };
  if (s.skipped) o.skipped = s.skipped;
  else if (s.failed) o.failed = s.failed;
  else {
    o.median = round(seriesMedian(s), 3);
    o.runs = s.runs.map((x) => round(x, 3));
    o.unit = s.unit;
    if (s.fractionOfPlain !== undefined) o.fraction_of_plain = round(s.fractionOfPlain, 3);
  }
  if (s.note) o.note = s.note;
  return JSON.stringify(o);
}

function pkgVersion(name: string): string {
  try {
    return JSON.parse(readFileSync(new URL(`../node_modules/${name}/package.json`, import.meta.url), 'utf8')).version;
  } catch {
    return 'not installed';
  }
}

/**
 * The commit rea's source is at, and whether src/ differs from it: taken when the run starts,
 * before rea is compiled, since that build is what every figure measures (an edit made while a run
 * goes on is not in it).
 */
export function sourceRevision(): string {
  try {
    const commit = execSync('git rev-parse --short HEAD', { cwd: new URL('..', import.meta.url) }).toString().trim();
    const dirty = execSync('git status --porcelain -- src', { cwd: new URL('..', import.meta.url) }).toString().trim();
    return dirty ? `${commit} (src/ has uncommitted changes)` : commit;
  } catch {
    return 'unknown'; // not a git checkout
  }
}

export async function environment(commit: string): Promise<Record<string, string>> {
  const pool = adminPool();
  const show = async (k: string) => (await pool.query(`show ${k}`)).rows[0][k];
  const rea = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).version;
  const cpus = os.cpus();
  return {
    'rea': `${rea} @ ${commit}`,
    'graphile-worker': pkgVersion('graphile-worker'),
    'pg-boss': pkgVersion('pg-boss'),
    'pg (node-postgres)': pkgVersion('pg'),
    'tsx': pkgVersion('tsx'),
    'Node.js': process.version,
    'PostgreSQL': (await pool.query('select version() as v')).rows[0].v,
    'shared_buffers': await show('shared_buffers'),
    'synchronous_commit': await show('synchronous_commit'),
    'max_connections': await show('max_connections'),
    'fsync': await show('fsync'),
    'wal_level': await show('wal_level'),
    'machine': `${cpus.length} × ${cpus[0]?.model ?? 'cpu'}, ${round(os.totalmem() / 2 ** 30, 1)} GiB RAM, ${os.type()} ${os.release()}`,
    'database host': 'same machine as the benchmark (127.0.0.1)',
    // Other work on the box moves every figure; a high load here means the run was not quiet.
    'load average at the end (1/5/15 min)': os.loadavg().map((x) => x.toFixed(2)).join(' / ') + ` on ${cpus.length} CPUs`,
  };
}

export interface Target {
  figure: string;
  text: string;
  /** undefined when the figure is missing (skipped, failed or not run). */
  met: boolean | undefined;
  value: string;
}

export function markdown(p: {
  title: string;
  quick: boolean;
  partial: boolean;
  command: string;
  date: string;
  reps: number;
  sizes: Record<string, string>;
  env: Record<string, string>;
  series: Series[];
  targets: Target[];
  failures: string[];
  notes: string[];
}): string {
  const L: string[] = [];
  L.push(`# ${p.title}`, '');
  if (p.quick) {
    L.push('> **QUICK MODE — not the real run.** Fewer events, ' + `${p.reps} repetition(s)` +
      '; the figures only show the harness works. The real figures come from `npm run bench` (no flags).', '');
  }
  if (p.partial) L.push('> **Partial run** (`--only`): only some figures were measured.', '');
  if (p.failures.length) {
    L.push('> **FAILED:** ' + p.failures.length + ' run(s) failed; their figures are missing below.', '');
    for (const f of p.failures) L.push('> - ' + f.split('\n')[0]);
    L.push('');
  }
  L.push(`- command: \`${p.command}\``, `- date: ${p.date}`, `- repetitions: ${p.reps}, A/B interleaved (rea, graphile-worker, pg-boss, rea, …); the median is reported`, '');
  L.push('## Environment', '', '| | |', '|---|---|');
  for (const [k, v] of Object.entries(p.env)) L.push(`| ${k} | ${v} |`);
  L.push('', '## Sizes', '', '| | |', '|---|---|');
  for (const [k, v] of Object.entries(p.sizes)) L.push(`| ${k} | ${v} |`);
  L.push('', '## Figures', '', '| figure | system | median | unit | runs | fraction of plain |', '|---|---|---:|---|---|---:|');
  for (const s of p.series) {
    if (s.skipped) {
      L.push(`| ${s.figure} | ${s.system} | skipped | | ${s.skipped} | |`);
      continue;
    }
    if (s.failed) {
      L.push(`| ${s.figure} | ${s.system} | FAILED | | ${s.failed.split('\n')[0]} | |`);
      continue;
    }
    const fr = s.fractionOfPlain === undefined ? '' : round(s.fractionOfPlain, 3).toString();
    L.push(`| ${s.figure} | ${s.system} | ${fmt(seriesMedian(s))} | ${s.unit} | ${s.runs.map(fmt).join(', ')} | ${fr} |`);
  }
  L.push('', '## Targets (issue 6)', '', '| figure | target | value | met |', '|---|---|---|---|');
  for (const t of p.targets) L.push(`| ${t.figure} | ${t.text} | ${t.value} | ${t.met === undefined ? 'not measured' : t.met ? 'met' : '**not met**'} |`);
  L.push('', '## How each figure is measured', '');
  for (const n of p.notes) L.push(`- ${n}`);
  L.push('');
  return L.join('\n');
}

function fmt(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  if (Math.abs(x) >= 100) return Math.round(x).toLocaleString('en-US');
  return round(x, 2).toString();
}
