// rea retention run: one retention pass now, saying what it removed (or, with --dry-run, what it
// would remove). With --module it uses the application's bus: its settings, its registered
// application tables and its handlers' retry schedules (which bound the consume-record window).
import { Command } from 'commander';
import { formatMs } from '../admin/alerts.js';
import type { Bus } from '../bus.js';
import type { RetentionReport } from '../maintenance/retention.js';
import { addConnectionFlags, type ConnectionFlags } from './settings.js';
import { withAdminBus } from './admin-bus.js';
import { exitSoon, loadBus } from './run.js';

export function retentionCommand(): Command {
  const run = addConnectionFlags(new Command('run').description('run every retention rule once and report what it removed'))
    .option('--dry-run', 'count what would be removed; delete nothing')
    .option('--module <path>', "use the bus a module exports (its retention settings and registered tables) instead of the defaults")
    .option('--json', 'print the report as JSON')
    .action(async (flags: ConnectionFlags & { dryRun?: boolean; module?: string; json?: boolean }) => {
      const pass = (bus: Bus<any>) => bus.retention.run({ dryRun: flags.dryRun === true });
      let report: RetentionReport;
      if (flags.module) {
        try {
          const bus = await loadBus(flags.module, '--module');
          try {
            report = await pass(bus);
          } finally {
            await bus.stop();
          }
        } finally {
          // The module may hold the process open (its own HTTP server, as the one given to `rea run`):
          // once the pass is over, whether it succeeded or not, the process ends.
          exitSoon();
        }
      } else {
        report = await withAdminBus(flags, pass);
      }
      console.log(flags.json ? JSON.stringify(report) : formatRetentionReport(report));
    });
  return new Command('retention').description('storage bounds: delete what is past its window').addCommand(run);
}

export function formatRetentionReport(r: RetentionReport): string {
  const verb = r.dryRun ? 'would remove' : 'removed';
  const width = Math.max(...r.rules.map((x) => x.rule.length), 4);
  const lines = [r.dryRun ? 'retention dry run: nothing was deleted' : 'retention pass'];
  for (const x of r.rules) {
    const name = x.rule.padEnd(width);
    if (x.olderThanMs < 0) {
      lines.push(`  ${name}  kept forever (window -1)`);
      continue;
    }
    const what = x.archived ? (r.dryRun ? 'would archive' : 'archived') : verb;
    const batches = r.dryRun ? '' : ` in ${x.batches} batch${x.batches === 1 ? '' : 'es'}`;
    lines.push(`  ${name}  older than ${formatMs(x.olderThanMs).padEnd(8)} ${what} ${x.removed} row${x.removed === 1 ? '' : 's'}${batches}`);
  }
  lines.push(`total: ${verb} ${r.removed} row${r.removed === 1 ? '' : 's'}`);
  return lines.join('\n');
}
