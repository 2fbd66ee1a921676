// rea status: the overview for people (alerts first, then backlog, jobs and table sizes), or
// --json for scripts; --check exits 1 while any alert holds (or the schema is not one this rea can
// run on), for cron jobs and probes.
import { Command } from 'commander';
import { formatMs } from '../admin/alerts.js';
import type { Overview } from '../bus.js';
import type { MigrationStatus } from '../driver/types.js';
import { formatBytes } from '../core/format.js';
import { addConnectionFlags, type ConnectionFlags } from './settings.js';
import { EXIT_FAILED } from './exit-codes.js';
import { withAdminBus } from './admin-bus.js';

export function statusCommand(): Command {
  return addConnectionFlags(new Command('status').description('show alerts, the backlog, poisoned events, jobs by state and table sizes'))
    .option('--json', 'print the overview as JSON')
    .option('--check', "exit with status 1 when any alert holds, or the schema's migrations are behind this rea or a newer rea's breaking ones")
    .action(async (flags: ConnectionFlags & { json?: boolean; check?: boolean }) => {
      const { overview, migrations } = await withAdminBus(flags, async (bus) => ({
        overview: await bus.overview(),
        migrations: await bus.driver.migrationStatus!(),
      }));
      console.log(flags.json ? JSON.stringify({ ...overview, migrations }) : formatOverview(overview, migrations));
      // A schema behind this rea (its record() fails, its workers do not start) or marked breaking by
      // a newer one (this rea must not write) fails the check as an alert does: a probe passed on it.
      if (flags.check && (overview.alerts.length > 0 || migrations.pending.length > 0 || migrations.breaking.length > 0)) process.exitCode = EXIT_FAILED;
    });
}

/** Where the schema stands, when it is not where this rea expects it: null when it is. */
export function formatMigrations(m: MigrationStatus): string | null {
  const lines: string[] = [];
  if (m.pending.length > 0) {
    lines.push(`${m.pending.length} pending (${m.pending.map((p) => `${p.version} ${p.name}`).join(', ')}): run rea migrate; until then a rea of this version fails to start, and its record() fails`);
  }
  if (m.breaking.length > 0) {
    lines.push(`migration${m.breaking.length > 1 ? 's' : ''} ${m.breaking.join(', ')} of a newer rea, marked breaking (this rea knows up to ${m.knownUpTo}): this rea refuses to write, and may misread what changed; run a rea at least as new`);
  } else if (m.newer.length > 0) {
    lines.push(`migration${m.newer.length > 1 ? 's' : ''} ${m.newer.join(', ')} of a newer rea (this rea knows up to ${m.knownUpTo}): upgrade it`);
  }
  return lines.length > 0 ? lines.join('\n           ') : null;
}

export function formatAge(ms: number | null): string {
  return ms === null ? '-' : formatMs(ms);
}

export function formatOverview(o: Overview, migrations?: MigrationStatus): string {
  const at = o.at instanceof Date ? o.at.getTime() : Date.parse(String(o.at));
  const est = (key: string, n: number) => (o.estimated?.includes(key) ? `~${n}` : String(n));
  const lines: string[] = [];
  const alerts = o.alerts ?? [];
  if (alerts.length === 0) {
    lines.push('alerts   none');
  } else {
    lines.push(`alerts   ${alerts.length}`);
    for (const a of alerts) {
      const since = a.since ? ` (since ${new Date(a.since).toISOString()}, ${formatMs(Math.max(0, at - new Date(a.since).getTime()))} ago)` : '';
      lines.push(`  ! ${a.name}: ${a.message}${since}`);
    }
  }
  const behind = migrations ? formatMigrations(migrations) : null;
  if (behind) lines.push(`migrations ${behind}`);
  lines.push(`events   backlog ${est('backlog', o.backlog)} unfanned · oldest ${formatAge(o.oldestUnfannedAgeMs)} · poisoned ${est('poisoned', o.poisoned)}`);
  lines.push(`jobs     ${Object.entries(o.jobs).map(([state, n]) => `${state} ${est(`jobs.${state}`, n)}`).join(' · ')}`);
  if (o.tables?.length) lines.push(`tables   ${o.tables.map((t) => `${t.name} ${formatBytes(t.totalBytes)}`).join(' · ')}`);
  if (o.estimated?.length) lines.push(`         ~ = planner estimate (${o.estimated.join(', ')}); exact counts stop at overview.exactCountLimit`);
  return lines.join('\n');
}
