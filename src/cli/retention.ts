// rea retention run: one retention pass now, saying what it removed (or, with --dry-run, what it
// would remove). With --module it uses the application's bus: its settings, its registered
// application tables and its handlers' retry schedules (which bound the consume-record window);
// a pass that deletes without it uses rea's defaults, and only when --defaults asks for them.
import { Command } from 'commander';
import { formatMs } from '../admin/alerts.js';
import type { Bus } from '../bus.js';
import { OptionsError } from '../core/errors.js';
import type { RetentionReport } from '../maintenance/retention.js';
import { addConnectionFlags, type ConnectionFlags } from './settings.js';
import { UsageError } from './usage-error.js';
import { withAdminBus } from './admin-bus.js';
import { exitSoon, loadBus } from './run.js';

export function retentionCommand(): Command {
  const run = addConnectionFlags(new Command('run').description("run the retention rules once (events, events_archive, jobs by state, consumes, and with --module the tables its bus registers) and report what each removed; not the webhook attempt log, which the leader trims on its own (webhooks.attemptRetentionMs)"))
    .option('--dry-run', 'count what would be removed; delete nothing')
    .option('--module <path>', "use the bus a module exports (its database, retention settings, handlers' retry schedules and registered tables); what a pass that deletes should use")
    .option('--defaults', "delete by rea's default windows (events 7 d, consume records from the default retry schedule), not your application's settings; without --module, a pass that deletes needs it")
    .option('--json', 'print the report as JSON')
    .action(async (flags: ConnectionFlags & { dryRun?: boolean; module?: string; defaults?: boolean; json?: boolean }) => {
      if (flags.module && flags.defaults) {
        throw new UsageError('--defaults', '--module runs the pass with the settings of the bus it builds; give --module or --defaults, not both');
      }
      // Without --module the pass knows none of the application's settings: a longer events window
      // or an archive, a handler's long backoff (which the consume records' window must cover, or a
      // transactional handler loses its exactly-once guard early). Its deletes are rea's defaults,
      // which must be asked for by name; a dry run deletes nothing and needs neither.
      if (!flags.module && !flags.defaults && !flags.dryRun) {
        throw new UsageError('--module', "without it the pass would delete by rea's default windows, not your application's retention settings (its events window, archive, handlers' retry schedules): give --module <path> (the module that exports your bus, as for rea run), or --defaults to delete by the defaults, or --dry-run to see what they would remove");
      }
      const pass = (bus: Bus<any>) => bus.retention.run({ dryRun: flags.dryRun === true });
      let report: RetentionReport;
      if (flags.module) {
        // The module's bus was built with its own database and schema, and the pass runs there: a
        // connection flag would be silently ignored, and a pass meant for one database would delete
        // rows in another. Refuse it, before the module is loaded.
        const given = ([['databaseUrl', '--database-url'], ['pglite', '--pglite'], ['schema', '--schema']] as const).find(([key]) => flags[key] !== undefined);
        if (given) {
          throw new OptionsError(given[1], `--module runs the pass on the database and schema of the bus ${flags.module} builds, not on the ones ${given[1]} names: set them in the module, or drop --module and give --defaults to run rea's default rules where the flags say`);
        }
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
