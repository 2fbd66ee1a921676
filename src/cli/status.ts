// rea status: backlog, poisoned rows, oldest unfanned age and jobs by state; --json for scripts.
import { Command } from 'commander';
import type { Overview } from '../bus.js';
import { addConnectionFlags, type ConnectionFlags } from './settings.js';
import { withAdminBus } from './admin-bus.js';

export function statusCommand(): Command {
  return addConnectionFlags(new Command('status').description('show the backlog, poisoned events and jobs by state'))
    .option('--json', 'print JSON')
    .action(async (flags: ConnectionFlags & { json?: boolean }) => {
      const overview = await withAdminBus(flags, (bus) => bus.overview());
      console.log(flags.json ? JSON.stringify(overview) : formatOverview(overview));
    });
}

export function formatAge(ms: number | null): string {
  if (ms === null) return '-';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)} min`;
  return `${(ms / 3_600_000).toFixed(1)} h`;
}

export function formatOverview(o: Overview): string {
  const lines = [
    `events   backlog ${o.backlog} unfanned · oldest ${formatAge(o.oldestUnfannedAgeMs)} · poisoned ${o.poisoned}`,
    `jobs     ${Object.entries(o.jobs).map(([state, n]) => `${state} ${n}`).join(' · ')}`,
  ];
  return lines.join('\n');
}
